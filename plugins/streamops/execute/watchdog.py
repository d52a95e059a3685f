"""The watchdog: find failed stage runs, restart each from its checkpoint, measure the recovery.

A run has failed when its driver process is gone while the run is live (`dead_pid`), when it
is stopped (`stopped`: SIGSTOP or a debugger, seen so by two of the supervisor's polls in a row;
killed first), when it is alive but has not beaten for `stale_s` (`stale_heartbeat`: killed
first), or when the driver recorded that a query died (`query_failed`; `data_lost` when its Kafka topic's
records were deleted before they were read: given up at once, never restarted into the same error). A
stage a reconfiguration is working
on is skipped: its executor holds the stage lock and owns the restart (or the rollback).

Every failure is one `failures` row, written before the restart (persist first, then act).
The restart reuses the last run's cores, pool and checkpoint, so the replayable source and the
idempotent sink make the output the same as a failure-free run's. After `max_restarts` failed
restarts in a row the stage is marked `failed` and `WatchdogAlert` is raised. A given-up stage is
still watched: a failure of its run is recorded, not restarted, until a start clears the give-up.
Its limits (silence, stall, launch, the backoff between restarts) are in execute/failure_limits.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

from streamops import checkpoint_repair, processes, registry, spark_cluster
from streamops.agent import data_loss, state_schema
from streamops.execute import broker_heal, gaps, mechanisms, pending, reconfigure, replicas, stages, stops
from streamops.execute.failure_limits import (
    LAUNCH_LIMIT_S,
    LAUNCH_RETRIES,
    RESTART_BACKOFF_S,
    STALL_S,
    restart_delay,
    silent_too_long,
    stalled_for,
)
from streamops.execute.gaps import WRITE_PROBE_S, write_gap
from streamops.execute.launcher import launcher_for
from streamops.store import db, failures, ledger
from streamops.store import reconfigurations as rstore

log = logging.getLogger("streamops.watchdog")


class WatchdogAlert(RuntimeError):
    """Stages the watchdog gave up on; the message names each with its last error."""


@dataclass(frozen=True)
class Failure:
    stage_id: str
    deployment_id: int
    kind: str
    detail: str
    failed_at: datetime
    role: str = "primary"
    given_up: str | None = None  # the stage was given up on (why): recorded, not restarted

    @property
    def who(self) -> str:
        return self.stage_id if self.role == "primary" else f"{self.stage_id} ({self.role})"


@dataclass
class Recovery:
    stage_id: str
    failure_id: int
    kind: str
    status: str  # recovered | retrying | gave_up | withdrawn (not a failure: the database held its beats back)
    attempts: int
    mttr_s: float | None = None
    downtime_s: float | None = None
    detail: str = ""


@dataclass
class WatchdogReport:
    checked: int = 0
    recoveries: list[Recovery] = field(default_factory=list)
    reconfigurations: list[reconfigure.Outcome] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    workers_restarted: list[int] = field(default_factory=list)  # embedded Spark workers found dead
    replicas: replicas.Reconciled | None = None  # started or stopped to match the wanted count

    @property
    def gave_up(self) -> list[Recovery]:
        return [r for r in self.recoveries if r.status == "gave_up"]


def detect(stale_s: float = 60.0, seen_alive: dict[int, datetime] | None = None,
           candidates: list | None = None, stall_s: float | None = STALL_S,
           stopped: dict[int, stops.Stopped] | None = None) -> list[Failure]:
    """The replicas (the primary, 'replica-N') whose latest run has failed. `seen_alive`: when a
    caller that polls often (the supervisor) last saw each driver alive, a closer failure time
    than its last heartbeat. `stopped`: the runs whose driver that caller has seen stopped long
    enough (`stops.StopWatch`), by deployment id. A stage the watchdog gave up on is still
    watched (its failure says so, `given_up`: recorded, not restarted), but a run that ended
    before the give-up is the one given up on, recorded already."""
    seen_alive, stopped = seen_alive or {}, stopped or {}
    out = []
    for d in failures.watchdog_candidates() if candidates is None else candidates:
        if d.health == "failed" and _given_up_on(d):
            continue
        f = _failure_of(d, stale_s, seen_alive, stall_s, stopped)
        if f is not None:
            out.append(f if d.health != "failed" else replace(f, given_up=d.health_reason or "given up"))
    return out


def _given_up_on(d) -> bool:
    """Is a given-up stage's run the one (or one before the one) it was given up on?"""
    if d.status in ("starting", "running"):
        return False  # started since, or never ended: its death is news
    return d.given_up_at is None or (d.stopped_at or d.started_at) <= d.given_up_at


def _failure_of(d, stale_s: float, seen_alive: dict[int, datetime], stall_s: float | None,
                stopped: dict[int, stops.Stopped]) -> Failure | None:
    """How a `watchdog_candidates` row's run has failed, or None."""
    last_sign = d.beat_at or d.running_at or d.started_at
    # A run still `starting` without a pid is being launched right now: not a failure (until
    # LAUNCH_LIMIT_S). A `stopping` run whose driver is gone was asked to stop: its stopper
    # records the end.
    if d.status in ("starting", "running") and d.pid is not None and not stages.is_alive(d):
        return Failure(d.stage_id, d.id, "dead_pid", f"driver pid {d.pid} is gone while the run is {d.status}",
                       max(last_sign, seen_alive.get(d.id, last_sign)), d.role)
    if d.status in ("starting", "running") and (stop := stopped.get(d.id)) is not None:
        # it stopped after the last poll that saw it running (and after its last beat)
        return Failure(d.stage_id, d.id, "stopped", stop.detail,
                       max(last_sign, stop.last_running or last_sign), d.role)
    if d.status == "starting" and d.silent_s is not None and d.silent_s > LAUNCH_LIMIT_S:
        what = "its launch never completed (no pid)" if d.pid is None else "its driver never came up"
        return Failure(d.stage_id, d.id, "launch_failed", f"still starting after {d.silent_s:.0f}s: {what}",
                       d.started_at, d.role)
    if d.status == "running" and silent_too_long(d.silent_s, d.server_up_s, stale_s):
        return Failure(d.stage_id, d.id, "stale_heartbeat",
                       f"no heartbeat for {d.silent_s:.0f}s (limit {stale_s:.0f}s)", d.beat_at or d.running_at,
                       d.role)
    if d.status == "running" and (idle := stalled_for(d.beat_info, d.silent_s, stall_s)) is not None:
        # from its last progress, as its beat dated it: the stall began there, not at the beat
        return Failure(d.stage_id, d.id, "stalled",
                       f"no commit for {idle:.0f}s while {gaps.waiting(d.beat_info)} wait "
                       f"(limit {stall_s:.0f}s)", d.beat_at - timedelta(seconds=float(d.beat_info["since_progress_s"])),
                       d.role)
    if d.status == "failed" and (d.stop_reason or "").startswith(stages.LAUNCH_FAILED):
        return Failure(d.stage_id, d.id, "launch_failed", d.stop_reason, d.stopped_at or d.started_at, d.role)
    if d.status == "failed" and data_loss.MARKER in (d.stop_reason or ""):
        return Failure(d.stage_id, d.id, "data_lost", d.stop_reason, d.stopped_at or d.started_at, d.role)
    if d.status == "failed" and not (d.stop_reason or "").startswith("driver process gone"):
        return Failure(d.stage_id, d.id, "query_failed", d.stop_reason or "the driver recorded a failure",
                       d.stopped_at or d.started_at, d.role)
    if d.status == "failed":
        return Failure(d.stage_id, d.id, "dead_pid", d.stop_reason, d.stopped_at or d.started_at, d.role)
    return None


def still_failed(f: Failure, stale_s: float, stall_s: float | None = STALL_S,
                 probe_s: float = WRITE_PROBE_S) -> bool:
    """Under the stage lock: is `f`'s run still its replica's latest (a supervisor and the DAG
    may both have found it; the first to take the lock recovers it, the other does nothing), and
    for a hung driver, is it still silent, with the database taking writes? A recovery may wait
    its turn behind others (or behind the lock) while a driver that was only cut off by a
    database outage beats again: it must not be killed on an old reading."""
    latest = ledger.latest_run(f.stage_id, role=f.role)
    if latest is None or latest.id != f.deployment_id:
        return False
    if f.kind == "stopped":  # still stopped (or gone meanwhile); one that was let go runs on
        return latest.pid is None or not processes.is_alive(latest.pid) or stops.stopped_now(latest.pid)
    if f.kind not in ("stale_heartbeat", "stalled"):
        return True
    now = failures.heartbeat_silence(f.deployment_id)
    if now is None:
        return False
    if f.kind == "stalled":
        return stalled_for(now.beat_info, now.silent_s, stall_s) is not None
    return silent_too_long(now.silent_s, now.server_up_s, stale_s) and write_gap(probe_s) is None


def repair_checkpoint(fid: int, ckpt: str, who: str, progress=lambda _: None) -> None:
    """Before a restart, with the failed run gone: move a torn checkpoint's newest entries aside
    (checkpoint_repair) and name them on the failure. Raises CheckpointTorn when it must not."""
    moved = checkpoint_repair.repair_stage(Path(ckpt))
    if moved:
        what = f"checkpoint repaired: moved aside {checkpoint_repair.describe(moved)}"
        failures.note(fid, what)
        log.warning("stage %s: action=checkpoint-repair failure=%d: %s", who, fid, what)
        progress(f"{who}: {what}")


def recover(f: Failure, app: str, reg: registry.Registry, *, max_restarts: int = 3, wait_s: float = 180,
            progress=lambda _: None, detected_by: str = "watchdog", spare=None,
            probe_s: float = WRITE_PROBE_S, backoff_s: float = RESTART_BACKOFF_S,
            lock: rstore.StageLock | None = None) -> Recovery:
    """Record `f`, end its run and restart it; under the stage `lock`, which the wait before a
    restart lets go (`_wait_unlocked`)."""
    fid, attempts, new = failures.open_failure(f.stage_id, app, f.deployment_id, f.kind, f.detail, f.failed_at,
                                               role=f.role, detected_by=detected_by)
    if new:
        log.warning("stage %s: action=failure-detected role=%s kind=%s failure=%d by=%s: %s", f.stage_id, f.role,
                    f.kind, fid, detected_by, f.detail)
    # Once more, after the failure row's own write and just before the kill: a database that
    # stopped taking writes since the last look holds every beat back, and a kill is not undone.
    if f.kind == "stale_heartbeat" and (gap := write_gap(probe_s)) is not None:
        return _withdraw(f, fid, new, attempts, gap, progress)
    dep = ledger.deployment(f.deployment_id)
    _end_run(f, fid, dep)
    if (final := _not_restarted(f, fid, attempts, progress)) is not None:
        return final
    if f.kind == "launch_failed":
        # The infrastructure (a master, a worker, a spare) is what failed, not the stage: retry
        # for longer than a stage that fails by itself.
        max_restarts = max(max_restarts, LAUNCH_RETRIES)
    if (gone := _wait_unlocked(f, restart_delay(f.kind, attempts, backoff_s), lock)) is not None:
        log.info("stage %s: action=retry-dropped failure=%d: %s", f.stage_id, fid, gone)
        return Recovery(f.stage_id, fid, f.kind, "retrying", attempts, detail=gone)
    try:
        repair_checkpoint(fid, dep.checkpoint, f.who, progress)
    except checkpoint_repair.CheckpointTorn as e:  # no restart can help: give up now, naming the file and the fix
        failures.give_up(fid, str(e))
        log.error("stage %s: action=give-up failure=%d: %s", f.stage_id, fid, e)
        return Recovery(f.stage_id, fid, f.kind, "gave_up", attempts, detail=str(e))
    failures.count_attempt(fid)
    attempts += 1
    progress(f"{f.who}: {f.kind}: {f.detail}; restart {attempts} of {max_restarts} from its checkpoint")
    return _restart(f, fid, attempts, max_restarts, reg, wait_s=wait_s, progress=progress, spare=spare)


def _end_run(f: Failure, fid: int, dep) -> None:
    """The failed run ends: killed first when its driver may still be there, then `failed`."""
    if f.kind in ("stale_heartbeat", "stopped", "stalled", "launch_failed") and dep.pid is not None:
        # a hung, stopped or stalled driver must not keep writing beside its successor: SIGKILL
        # to its process group (its JVM too) reaches a stopped process as well; only our own
        # host's, still the recorded process: another host's is fenced by its successor
        if (why := stages.not_ours_to_kill(dep)) is None:
            launcher_for(dep.master).terminate(dep.pid, dep.driver_id, force=True)
        else:
            log.warning("stage %s: action=no-kill failure=%d: %s", f.stage_id, fid, why)
            failures.note(fid, f"not killed: {why}")
    ledger.finish(f.deployment_id, "failed", f"watchdog: {f.detail}")


def _not_restarted(f: Failure, fid: int, attempts: int, progress) -> Recovery | None:
    """The failures no restart is for: a stage given up on, a loss of input or a state schema
    change (a restart meets them again), a replica no longer wanted. None: restart it."""
    if f.given_up is not None:
        return _recorded_only(f, fid, attempts, progress)
    # A restart reads the same missing offsets, or the same state with the same code: the operator's move.
    if f.kind == "data_lost" or state_schema.MARKER in (f.detail or ""):
        failures.give_up(fid, f.detail)
        log.error("stage %s: action=give-up failure=%d kind=%s: %s", f.stage_id, fid, f.kind, f.detail)
        progress(f"{f.who}: {f.detail}")
        return Recovery(f.stage_id, fid, f.kind, "gave_up", attempts, detail=f.detail)
    if f.role != replicas.PRIMARY and replicas.index(f.role) >= replicas.wanted(f.stage_id):
        # A replica no longer wanted (the redundancy manager gave it back): not restarted; the
        # failure ends with the stage's next output from the others.
        # closed with no run of its own: the store writes NULLs, its annotation says datetime and int
        row = failures.recovered(fid, None, None)
        progress(f"{f.who}: not restarted, no longer wanted")
        return Recovery(f.stage_id, fid, f.kind, "recovered", attempts, row.mttr_ms / 1000 if row else None,
                        row.downtime_ms / 1000 if row else None, "replica no longer wanted")
    return None


def _restart(f: Failure, fid: int, attempts: int, max_restarts: int, reg: registry.Registry, *, wait_s: float,
             progress, spare) -> Recovery:
    """Restart attempt `attempts` of `max_restarts`: the stage (or its replica) started again from
    its checkpoint, recovered at its first output; else retried by the next cycle, or given up."""
    why = None
    try:
        if f.role == "primary":
            res = stages.start_stage(f.stage_id, reg, wait_s=min(wait_s, 240), progress=progress, spare=spare,
                                     warm_up=False, size_for_input=False)  # the cores it last had (a spare's)
        else:
            res = replicas.start_replica(f.stage_id, f.role, reg, wait_s=min(wait_s, 240), progress=progress,
                                         spare=spare)
        recovered_at, _, why = mechanisms.wait_first_output(res.deployment_id, wait_s, who="the restarted run")
    except Exception as e:  # any failed restart is one attempt; the next cycle tries again or gives up
        log.exception("stage %s: action=restart failed", f.stage_id)
        recovered_at, why, res = None, f"{type(e).__name__}: {e}", None
    if recovered_at is not None and res is not None:  # a first output is waited for only once res is set
        row = failures.recovered(fid, recovered_at, res.deployment_id)
        mttr_s, downtime_s = (row.mttr_ms / 1000, row.downtime_ms / 1000) if row else (None, None)
        log.info("stage %s: action=recovered role=%s failure=%d mttr=%ss downtime=%ss", f.stage_id, f.role, fid,
                 mttr_s, downtime_s)
        progress(f"{f.who}: recovered (deployment {res.deployment_id}); MTTR {mttr_s or 0:.1f}s, "
                 f"output gap {downtime_s or 0:.1f}s")
        return Recovery(f.stage_id, fid, f.kind, "recovered", attempts, mttr_s, downtime_s)
    if attempts >= max_restarts:
        reason = f"{attempts} restarts in a row failed; last: {why}"
        failures.give_up(fid, reason)
        log.error("stage %s: action=give-up failure=%d: %s", f.stage_id, fid, reason)
        return Recovery(f.stage_id, fid, f.kind, "gave_up", attempts, detail=reason)
    log.warning("stage %s: action=restart-failed failure=%d attempt=%d: %s", f.stage_id, fid, attempts, why)
    return Recovery(f.stage_id, fid, f.kind, "retrying", attempts, detail=why or "")


def _wait_unlocked(f: Failure, delay_s: float, lock: rstore.StageLock | None) -> str | None:
    """Wait `delay_s` before a restart without the stage lock: a launch retry's minute (the
    master down) would block the stage's reconfigurations and other recoveries. Re-taken, the
    retry must still be wanted: why not (the next cycle decides again), or None."""
    if delay_s <= 0:
        return None
    if lock is None:
        time.sleep(delay_s)
        return None
    if not lock.pause(delay_s):
        return "the stage lock was taken during the wait: its holder acts on the stage"
    latest = ledger.latest_run(f.stage_id, role=f.role)
    if latest is None or latest.id != f.deployment_id:
        return "the stage was started during the wait"
    if f.stage_id in rstore.active_stage_ids():
        return "a reconfiguration started during the wait"
    return None


def _recorded_only(f: Failure, fid: int, attempts: int, progress) -> Recovery:
    """A run of a stage given up on failed: recorded (the run `failed`, the failure given up, the
    stage's reason kept), not restarted. The give-up stops the automatic restarts, not the watching:
    a run started by hand since, then lost, is not left `running` with a dead pid."""
    what = "not restarted: the watchdog had given up on the stage; fix it, then start or redeploy it"
    failures.note(fid, what)
    failures.give_up(fid, f.given_up or what)
    log.error("stage %s: action=failure-recorded role=%s failure=%d kind=%s: %s", f.stage_id, f.role, fid, f.kind,
              what)
    progress(f"{f.who}: {f.kind}: {f.detail}; {what}")
    return Recovery(f.stage_id, fid, f.kind, "gave_up", attempts, detail=f"{f.detail}; {what}")


def _withdraw(f: Failure, fid: int, new: bool, attempts: int, gap: str, progress) -> Recovery:
    """A silent run not killed: the database gap silenced it. Its failure row, if just written, goes."""
    withdrawn = new and failures.withdraw(fid)
    log.warning("stage %s: action=failure-withdrawn role=%s failure=%d%s: %s; the silence is the database's",
                f.stage_id, f.role, fid, " (deleted)" if withdrawn else "", gap)
    progress(f"{f.who}: not killed: {gap}")
    return Recovery(f.stage_id, fid, f.kind, "withdrawn", attempts, detail=gap)


def cycle(reg: registry.Registry | None = None, *, stale_s: float = 60.0, max_restarts: int = 3,
          wait_s: float = 180, stall_s: float | None = STALL_S, progress=lambda _: None) -> WatchdogReport:
    """One watchdog pass: finish reconfigurations a dead executor left, then recover failed stages."""
    reg = reg or registry.load()
    report = WatchdogReport()
    # The embedded cluster first: the stages on it wait for its master and executors.
    report.workers_restarted = heal_cluster("watchdog", progress).workers
    broker_heal.heal_broker(reg, "watchdog", progress)  # the embedded Kafka broker, as the cluster
    close_late_failures(progress)
    pending.cancel_stale(reg, progress)  # pending ones whose asker failed or is gone: never run later unasked
    # A crashed executor's `running` reconfiguration first: its rollback may be the recovery.
    report.reconfigurations = reconfigure.resume(reg, progress=progress, statuses=("running",))
    found = detect(stale_s, stall_s=stall_s)
    health = failures.stages_health()
    report.checked = sum(1 for r in health if r.health == "ok")
    running = rstore.active_stage_ids()
    apps = {r.stage_id: r.app for r in health}
    for f in found:
        try:
            reg.stage(f.stage_id)
        except registry.RegistryError:
            report.skipped.append(f"{f.stage_id}: no longer in the registry")
            continue
        with rstore.stage_lock(f.stage_id) as free:
            if not free or f.stage_id in running:
                report.skipped.append(f"{f.who}: a reconfiguration or the supervisor is working on it")
                continue
            if not still_failed(f, stale_s, stall_s):
                report.skipped.append(f"{f.who}: already recovered")
                continue
            rec = recover(f, apps[f.stage_id], reg, max_restarts=max_restarts, wait_s=wait_s, progress=progress,
                          lock=free)
            if rec.status == "withdrawn":
                report.skipped.append(f"{f.who}: not killed: {rec.detail}")
            else:
                report.recoveries.append(rec)
    # Output gaps under way with no failure of their own (the DAG is the supervisor's second line).
    gaps.record(failures.watchdog_candidates(), detected_by="watchdog", progress=progress)
    # Replicas that are wanted but not running (a new count, or the primary is back).
    report.replicas = replicas.reconcile(reg, progress=progress)
    return report


def heal_cluster(detected_by: str, progress=lambda _: None) -> spark_cluster.Heal:
    """Restart the embedded cluster's dead master or workers (`spark_cluster.heal`), and record
    one failure for each stage running on it: its run lives, but it lost its executors or its
    scheduler for a while. Each is closed at the stage's first commit after the heal."""
    healed = spark_cluster.heal()
    if healed.error:
        progress(f"action=heal the Spark master did not come back: {healed.error.splitlines()[0]}")
    if not healed:
        return healed
    lost = (["the Spark master"] if healed.master_restarted else []) + [f"Spark worker-{i}" for i in healed.workers]
    what = " and ".join(lost) + (" were" if len(lost) > 1 else " was") + " dead and restarted"
    kind = "master_lost" if healed.master_restarted else "worker_lost"
    progress(f"action=heal {what}")
    # the last sighting, by this process's monotonic clock, dated by the database's, as the commits are
    since = db.time_of(healed.down_since_mono)
    for c in failures.watchdog_candidates():
        if c.master != "embedded" or c.status != "running":
            continue
        fid, _, created = failures.open_failure(c.stage_id, c.app, c.id, kind, f"{what}; the run went on", since,
                                                role=c.role, detected_by=detected_by)
        if created:
            log.warning("stage %s: action=heal role=%s failure=%d kind=%s: %s", c.stage_id, c.role, fid, kind, what)
    return healed


def close_late_failures(progress=lambda _: None) -> None:
    """Failures left open by a restart that committed only after its recovery stopped waiting,
    the cluster's failures once their stage committed after the heal, and given-up failures once a
    later run of their stage committed."""
    for r in failures.close_healed():
        log.info("stage %s: action=recovered role=%s failure=%d kind=%s mttr=%.1fs", r.stage_id, r.role, r.id,
                 r.kind, (r.mttr_ms or 0) / 1000)
        progress(f"{r.stage_id}: failure {r.id} ({r.kind}) closed at its first commit after the heal")
    for r in failures.close_late():
        log.info("stage %s: action=recovered role=%s failure=%d mttr=%.1fs (its restart committed late)",
                 r.stage_id, r.role, r.id, (r.mttr_ms or 0) / 1000)
        progress(f"{r.stage_id}: failure {r.id} closed: its restart committed after the recovery's wait")
    for r in failures.close_given_up():
        log.info("stage %s: action=repaired role=%s failure=%d given up; down %.1fs until a later run committed",
                 r.stage_id, r.role, r.id, (r.downtime_ms or 0) / 1000)


def failed_stages() -> list[tuple[str, str]]:
    return [(r.stage_id, r.health_reason or "") for r in failures.stages_health() if r.health == "failed"]


def clear_health(stage_ids: list[str]) -> None:
    """A redeploy puts a given-up stage back under the watchdog's care."""
    failures.clear_health(stage_ids)
