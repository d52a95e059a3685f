"""Reconfiguration mechanisms (POLICIES.md §5): realize a `reconfigurations` row, stamping every
phase, measuring downtime from output commits, and rolling back when the new run fails.

Persist first, then act: the row is `pending` before anything happens, is claimed atomically
(`running`), and a session-level advisory lock per stage is held while acting, so two callers
never reconfigure one stage at once and a dead executor's row can be found and finished.
"""

from __future__ import annotations

import contextlib
import getpass
import logging
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator, Protocol

from sqlalchemy import Connection

from streamops import registry
from streamops.agent.metrics import FileSourceBacklog
from streamops.execute import checkpoint, stages
from streamops.plan.change import InvalidChange, stage_of, validate_change
from streamops.store import db, ledger

log = logging.getLogger("streamops.reconfigure")
Progress = Callable[[str], None]


class ReconfigurationBusy(RuntimeError):
    """Another executor holds the stage."""


@dataclass(frozen=True)
class Outcome:
    reconfiguration_id: int
    stage_id: str
    status: str  # done | rolled_back | failed
    downtime_ms: float | None
    seconds: float
    detail: str


@dataclass(frozen=True)
class Deadlines:
    stop_s: float = 60.0
    first_batch_s: float = 120.0  # the new run must commit a batch (or be idle and healthy) by then
    caught_up_s: float = 120.0


class Mechanism(Protocol):
    name: str

    def run(self, ex: "Execution") -> None: ...

    def rollback(self, ex: "Execution", reason: str) -> None: ...


def _try_lock(conn: Connection, stage_id: str) -> bool:
    got = conn.execute(db.query("reconfiguration_lock_try"), {"stage_id": stage_id}).scalar()
    conn.commit()
    return bool(got)


def _unlock(conn: Connection, stage_id: str) -> None:
    # Explicitly: closing a pooled connection does not end its session, so the lock would outlive us.
    conn.execute(db.query("reconfiguration_unlock"), {"stage_id": stage_id})
    conn.commit()


@contextlib.contextmanager
def stage_lock(stage_id: str) -> Iterator[bool]:
    """Hold the stage's lock for a whole action (the watchdog's restart): yields whether it was
    free. Reconfigurations take the same lock, so the two never act on one stage at once."""
    conn = db.engine().connect()
    got = _try_lock(conn, stage_id)
    try:
        yield got
    finally:
        if got:
            _unlock(conn, stage_id)
        conn.close()


class Execution:
    """One reconfiguration being realized: its row, its stage, and the phase stamps."""

    def __init__(self, row, reg: registry.Registry, conn_lock: Connection, progress: Progress,
                 deadlines: Deadlines, fault: str | None):
        self.row, self.reg, self.lock_conn = row, reg, conn_lock
        self.progress, self.deadlines, self.fault = progress, deadlines, fault
        self.stage_id = row.stage_id
        self.old_deployment = None
        self.new_deployment_id: int | None = None
        self.rollback_copy: Path | None = None

    def stamp(self, phase: str) -> None:
        with db.engine().begin() as conn:
            conn.execute(db.query("reconfiguration_phase"), {"id": self.row.id, "phase": phase})
        self.progress(f"{self.stage_id}: reconfiguration {self.row.id}: {phase}")
        log.info("stage %s: action=%s phase=%s reconfiguration=%d", self.stage_id, self.row.action, phase, self.row.id)


def _deployment(dep_id: int):
    with db.engine().connect() as conn:
        return conn.execute(db.query("deployment_get"), {"id": dep_id}).one()


def wait_first_output(dep_id: int, timeout_s: float, input_dir: Path, ckpt: Path,
                      who: str = "the new run") -> tuple[datetime | None, bool, str | None]:
    """Wait for a run's first output: (when: its first commit, or when it ran healthy on an idle
    source; whether it committed; None) or (None, False, why not). Reconfigurations and the
    watchdog's restarts both judge a new run by this."""
    deadline = time.monotonic() + timeout_s
    launcher = stages.launcher_for("local")
    while time.monotonic() < deadline:
        with db.engine().connect() as conn:
            first = conn.execute(db.query("first_commit_of"), {"deployment_id": dep_id}).scalar()
        dep = _deployment(dep_id)
        if first is not None:
            return first, True, None
        if dep.status in ("failed", "stopped") or (dep.pid and not launcher.is_alive(dep.pid)):
            time.sleep(1)  # let the driver record its own reason
            return None, False, f"{who} (deployment {dep_id}) failed before its first commit: " \
                                f"{_deployment(dep_id).stop_reason or 'driver exited'}"
        if dep.status == "running" and FileSourceBacklog(input_dir, ckpt).measure().files == 0 \
                and time.monotonic() > deadline - timeout_s / 2:
            return dep.running_at, False, None  # idle source: nothing to commit, and the run is healthy
        time.sleep(0.5)
    return None, False, f"{who} (deployment {dep_id}) did not commit a batch within {timeout_s:.0f}s"


def wait_first_batch(ex: Execution, dep_id: int, input_dir: Path, ckpt: Path, stamp: bool = True) -> str | None:
    """None once the new run commits a batch (or runs healthy on an idle source); else why not."""
    _, committed, why_not = wait_first_output(dep_id, ex.deadlines.first_batch_s, input_dir, ckpt)
    if committed and stamp:
        ex.stamp("first_batch_done")
    return why_not


class PauseResume:
    """Stop at a batch boundary, copy the checkpoint for rollback, restart with the new cores,
    partitions or pool. The new driver repartitions the state offline before it starts."""

    name = "pause_resume"

    def run(self, ex: Execution) -> None:
        r = ex.row
        old = ledger.latest_run(ex.stage_id, live=True) or ledger.latest_run(ex.stage_id)
        if old is None:
            raise RuntimeError(f"stage {ex.stage_id} has never run: nothing to reconfigure")
        ex.old_deployment = old
        ckpt = Path(old.checkpoint)
        ex.stamp("stop_requested")
        if ledger.latest_run(ex.stage_id, live=True) is not None:
            stages.stop_stage(ex.stage_id, ex.reg, deadline_s=ex.deadlines.stop_s, requested_by=f"reconfiguration {r.id}")
        ex.stamp("stopped")
        if ckpt.exists():
            ex.rollback_copy = checkpoint.copy_stopped(ckpt, ckpt.with_name(f"{ckpt.name}.rollback-{r.id}"))
        partitions = r.target_partitions or checkpoint.state_partitions(ckpt) or old.state_partitions
        res = stages.start_stage(
            ex.stage_id, ex.reg, cores=r.target_cores, state_partitions=partitions, pool=r.target_pool,
            wait_s=ex.deadlines.first_batch_s, reconfiguration_id=r.id, fault=ex.fault,
        )
        ex.new_deployment_id = res.deployment_id
        ledger.link_reconfiguration(r.id, old_deployment_id=old.id, new_deployment_id=res.deployment_id)

    def rollback(self, ex: Execution, reason: str) -> None:
        _rollback(ex, reason)


# -- pre-staging: a consistent copy of the live checkpoint, repartitioned off to the side ------------
# A new run from a staged copy replays every batch since the copy before it is current again, so
# an old copy turns a short outage into a long catch-up. Beyond this many batches it is re-taken.
STAGED_MAX_LAG_BATCHES = 30
# An active backup's secondary may take this many catch-up deadlines while it keeps gaining.
ACTIVE_BACKUP_MAX_WAIT_FACTOR = 5


@dataclass(frozen=True)
class Staged:
    id: int
    path: str
    as_of_batch: int
    partitions: int
    source: str = ""


def _staged(stage_id: str) -> Staged | None:
    with db.engine().connect() as conn:
        r = conn.execute(db.query("staged_ready"), {"stage_id": stage_id}).first()
    return Staged(r.id, r.path, r.as_of_batch, r.partitions, r.source) if r else None


def staged_copy_stale(source: str, as_of_batch: int, live_checkpoint: str, live_batch: int | None,
                      max_lag: int | None = None) -> str | None:
    """Why a staged copy no longer serves the live run, or None when it does: it must come from
    the live run's checkpoint and be at most `max_lag` (STAGED_MAX_LAG_BATCHES) committed batches
    behind it."""
    max_lag = STAGED_MAX_LAG_BATCHES if max_lag is None else max_lag
    if Path(source) != Path(live_checkpoint):
        return f"it was copied from {source}, and the stage now runs from {live_checkpoint}"
    if live_batch is not None and live_batch - as_of_batch > max_lag:
        return (f"it is as of batch {as_of_batch}, {live_batch - as_of_batch} batches behind the live run "
                f"(at most {max_lag})")
    return None


def _repartition_copy(path: Path, partitions: int) -> None:
    """Repartition a *copy* in a short-lived Spark process: the stage's driver keeps running."""
    from streamops.paths import REPO_ROOT

    res = subprocess.run([sys.executable, str(REPO_ROOT / "spark_apps" / "repartition_job.py"), str(path), str(partitions)],
                         capture_output=True, text=True, env={**__import__("os").environ, "PYSPARK_PYTHON": sys.executable})
    if res.returncode != 0:
        tail = [line for line in res.stdout.splitlines() + res.stderr.splitlines() if "Error" in line or "Exception" in line]
        raise RuntimeError(f"repartition of the staged copy failed: {(tail or ['see the job output'])[-1][:300]}")


def prestage(stage_ref: str, partitions: int | None = None, reg: registry.Registry | None = None,
             progress: Progress = lambda _: None) -> Staged:
    """[001] State Manager: copy the running stage's checkpoint (consistent as of its last
    committed batch), repartition the copy to `partitions`, and record it as ready."""
    reg = reg or registry.load()
    app, name, st = reg.stage(stage_ref)
    sid = registry.stage_id(app, name)
    live = ledger.latest_run(sid, live=True)
    if live is None:
        raise RuntimeError(f"stage {sid} is not running: nothing to pre-stage")
    existing = _staged(sid)
    if existing is not None:
        stale = staged_copy_stale(existing.source, existing.as_of_batch, live.checkpoint,
                                  checkpoint.last_committed_batch(Path(live.checkpoint)))
        if stale is None and partitions in (None, existing.partitions):
            return existing
        why = stale or f"it has {existing.partitions} partitions, not {partitions}"
        log.info("stage %s: action=restage the staged copy %d is replaced: %s", sid, existing.id, why)
        progress(f"{sid}: re-staging: {why}")
        release(sid, reg)
    src = Path(live.checkpoint)
    dst = src.with_name(f"{src.name}.staged-{int(time.time() * 1000)}")
    started = time.monotonic()
    n = checkpoint.copy_live(src, dst)
    qsrc = checkpoint.quarantine_checkpoint(src)
    if checkpoint.last_committed_batch(qsrc) is not None:
        checkpoint.copy_live(qsrc, checkpoint.quarantine_checkpoint(dst))
    current = checkpoint.state_partitions(dst)
    target = partitions or current or live.state_partitions
    if st.stateful and current not in (None, target):
        progress(f"{sid}: repartitioning the staged copy {current} → {target}")
        _repartition_copy(dst, target)
    with db.engine().begin() as conn:
        r = conn.execute(db.query("staged_insert"), {"stage_id": sid, "source": str(src), "path": str(dst),
                                                     "as_of_batch": n, "partitions": target}).one()
    log.info("stage %s: action=prestage copy of batch %d, %d partitions, in %.1fs", sid, n, target, time.monotonic() - started)
    progress(f"{sid}: pre-staged as of batch {n} with {target} partitions in {time.monotonic() - started:.1f}s")
    return Staged(r.id, r.path, r.as_of_batch, r.partitions, r.source)


def release(stage_ref: str, reg: registry.Registry | None = None, status: str = "discarded") -> bool:
    """Discard the stage's pre-staged copy (the alarm cleared). Returns whether there was one."""
    reg = reg or registry.load()
    app, name, _ = reg.stage(stage_ref)
    staged = _staged(registry.stage_id(app, name))
    if staged is None:
        return False
    with db.engine().begin() as conn:
        conn.execute(db.query("staged_close"), {"id": staged.id, "status": status})
    if status == "discarded":
        shutil.rmtree(staged.path, ignore_errors=True)
        shutil.rmtree(checkpoint.quarantine_checkpoint(Path(staged.path)), ignore_errors=True)
    return True


class Prestaged:
    """Scale out from a pre-staged copy: stop the primary, start from the copy (already
    repartitioned), replay the batches since the copy from the source; the idempotent sink
    drops what it has seen. Downtime: stop + start, without the copy and the repartition."""

    name = "prestaged"

    def run(self, ex: Execution) -> None:
        r = ex.row
        old = ledger.latest_run(ex.stage_id, live=True)
        if old is None:
            raise RuntimeError(f"stage {ex.stage_id} is not running: use pause_resume")
        ex.old_deployment = old
        target_partitions = r.target_partitions or checkpoint.state_partitions(Path(old.checkpoint)) or old.state_partitions
        # the staged copy as it is, or a fresh one (reported) if none, the wrong layout or behind
        staged = prestage(ex.stage_id, target_partitions, ex.reg, ex.progress)
        ledger.link_reconfiguration(r.id, staged_checkpoint=staged.path, old_deployment_id=old.id)
        ex.stamp("stop_requested")
        stages.stop_stage(ex.stage_id, ex.reg, deadline_s=ex.deadlines.stop_s, requested_by=f"reconfiguration {r.id}")
        ex.stamp("stopped")
        res = stages.start_stage(ex.stage_id, ex.reg, cores=r.target_cores, state_partitions=staged.partitions,
                                 pool=r.target_pool, checkpoint_path=staged.path, wait_s=ex.deadlines.first_batch_s,
                                 reconfiguration_id=r.id, fault=ex.fault)
        release(ex.stage_id, ex.reg, status="used")
        ex.new_deployment_id = res.deployment_id
        ledger.link_reconfiguration(r.id, new_deployment_id=res.deployment_id)

    def rollback(self, ex: Execution, reason: str) -> None:
        _rollback(ex, reason)  # the old checkpoint was never touched: restart it as it was


class ActiveBackup:
    """[001] Secondary execution: start a secondary from a staged copy with the new
    configuration while the primary runs (both write to the idempotent sink); when the
    secondary has taken every input file the primary has, stop the primary. Output gap ≈ 0,
    at the price of both runs' cores during the overlap."""

    name = "active_backup"

    def run(self, ex: Execution) -> None:
        r = ex.row
        old = ledger.latest_run(ex.stage_id, live=True)
        if old is None:
            raise RuntimeError(f"stage {ex.stage_id} is not running: use pause_resume")
        ex.old_deployment = old
        # No copy for a secondary that cannot start (start_stage checks again, under the pool lock).
        pool, cores = r.target_pool or old.pool, r.target_cores or old.cores
        free, total = _pool_room(pool, ex.reg)
        if free < cores:
            raise stages.AdmissionRefused(f"start of {ex.stage_id} refused: pool {pool!r} has {free} free of {total} "
                                          f"cores; stage {ex.stage_id} needs {cores} beside the running one")
        target_partitions = r.target_partitions or checkpoint.state_partitions(Path(old.checkpoint)) or old.state_partitions
        staged = prestage(ex.stage_id, target_partitions, ex.reg, ex.progress)
        ledger.link_reconfiguration(r.id, staged_checkpoint=staged.path, old_deployment_id=old.id)
        res = stages.start_stage(ex.stage_id, ex.reg, cores=r.target_cores, state_partitions=staged.partitions,
                                 pool=r.target_pool, checkpoint_path=staged.path, role="secondary",
                                 wait_s=ex.deadlines.first_batch_s, reconfiguration_id=r.id, fault=ex.fault)
        release(ex.stage_id, ex.reg, status="used")
        ex.new_deployment_id = res.deployment_id
        ledger.link_reconfiguration(r.id, new_deployment_id=res.deployment_id)
        new = _deployment(res.deployment_id)
        st = registry.Stage.model_validate(new.config["spec"])
        inputs = registry.resolve_path(st.source.path)
        primary_log, secondary_log = FileSourceBacklog(inputs, Path(old.checkpoint)), FileSourceBacklog(inputs, Path(new.checkpoint))
        # The primary keeps serving while the secondary catches up, so waiting costs only cores: wait
        # as long as the secondary gains on the primary, up to ACTIVE_BACKUP_MAX_WAIT_FACTOR deadlines.
        started = time.monotonic()
        best, gained_at = None, started
        while True:
            behind = primary_log._seen() - secondary_log._seen()
            if behind <= 0 and checkpoint.last_committed_batch(Path(new.checkpoint)) is not None:
                break
            now = time.monotonic()
            if best is None or behind < best:
                best, gained_at = behind, now
            if now - gained_at > ex.deadlines.caught_up_s or now - started > ACTIVE_BACKUP_MAX_WAIT_FACTOR * ex.deadlines.caught_up_s:
                raise RuntimeError(f"the secondary (deployment {new.id}) did not reach the primary's input: "
                                   f"{behind} files behind after {now - started:.0f}s, "
                                   f"{now - gained_at:.0f}s without gaining")
            if _deployment(new.id).status not in ("starting", "running"):
                raise RuntimeError(f"the secondary (deployment {new.id}) stopped: {_deployment(new.id).stop_reason}")
            time.sleep(0.5)
        ex.stamp("stop_requested")
        stages.stop_stage(ex.stage_id, ex.reg, deadline_s=ex.deadlines.stop_s, requested_by=f"reconfiguration {r.id}")
        ex.stamp("stopped")
        with db.engine().begin() as conn:
            conn.execute(db.query("deployment_promote"), {"id": new.id})

    def rollback(self, ex: Execution, reason: str) -> None:
        """The primary was never stopped (unless the switch failed after it): stop the secondary."""
        try:
            stages.stop_stage(ex.stage_id, ex.reg, deadline_s=10, kill_after_s=5, role="secondary", requested_by="rollback")
        except stages.StageNotRunning:
            pass
        if ledger.latest_run(ex.stage_id, live=True) is None:
            _rollback(ex, reason)


MECHANISMS: dict[str, Mechanism] = {m.name: m for m in (PauseResume(), Prestaged(), ActiveBackup())}


def choose_mechanism(action: str, target_cores: int, target_pool_free: int, staged_ready: bool,
                     running: bool = True) -> tuple[str, str]:
    """The cost rule for a plan that names no mechanism (a policy grant): the smallest outage
    the resources allow. Returns (mechanism, why)."""
    if action == "scale_in":
        return "pause_resume", "a scale-in runs in the maintenance window, where a short outage is accepted"
    if not running:
        return "pause_resume", "the stage is not running: there is no old run to overlap or to stage from"
    if target_pool_free >= target_cores:
        return "active_backup", (f"the target pool has {target_pool_free} free cores for the new run beside the "
                                 f"old one: no outage")
    if staged_ready:
        return "prestaged", "a copy was staged at the alarming level: no copy or repartition in the outage"
    return "pause_resume", f"no room for an overlap ({target_pool_free} free cores < {target_cores}) and nothing staged"


def _pool_room(pool: str, reg: registry.Registry | None = None) -> tuple[int, int]:
    """(free, total) cores of a pool: its size from `reg` as admission sees it, else as deployed."""
    with db.engine().connect() as conn:
        used = conn.execute(db.query("pool_cores_in_use"), {"pool": pool}).scalar_one()
        total = (reg.pools[pool].cores if reg is not None and pool in reg.pools else
                 conn.execute(db.query("pool_cores"), {"pool": pool}).scalar() or 0)
    return total - used, total


def _rule_inputs(row) -> tuple[int, int, bool, bool]:
    with db.engine().connect() as conn:
        staged = conn.execute(db.query("staged_ready"), {"stage_id": row.stage_id}).first() is not None
    free, _ = _pool_room(row.target_pool or row.from_pool)
    return row.target_cores or row.from_cores or 1, free, staged, ledger.latest_run(row.stage_id, live=True) is not None


def _downtime_ms(ex: Execution, started: datetime) -> float:
    with db.engine().connect() as conn:
        before = conn.execute(db.query("last_commit_before"), {"stage_id": ex.stage_id, "ts": started}).scalar()
        return conn.execute(db.query("commit_gap"), {
            "stage_id": ex.stage_id, "from_ts": before or started,
            "to_ts": datetime.now(timezone.utc) + timedelta(seconds=1),
        }).scalar_one()


def _rollback(ex: Execution, reason: str) -> None:
    """Stop the new run, restore the checkpoint copy, restart the old configuration."""
    ex.progress(f"{ex.stage_id}: rolling back: {reason}")
    log.warning("stage %s: action=rollback reconfiguration=%d reason=%s", ex.stage_id, ex.row.id, reason)
    live = ledger.latest_run(ex.stage_id, live=True)
    if live is not None:
        try:
            stages.stop_stage(ex.stage_id, ex.reg, deadline_s=10, kill_after_s=5, requested_by="rollback")
        except stages.StageNotRunning:
            pass
    old = ex.old_deployment
    if old is None:
        raise RuntimeError("no previous run to roll back to")
    if ex.rollback_copy is not None and ex.rollback_copy.exists():
        checkpoint.restore(ex.rollback_copy, Path(old.checkpoint))
    res = stages.start_stage(ex.stage_id, ex.reg, cores=old.cores, state_partitions=old.state_partitions,
                             pool=old.pool, checkpoint_path=old.checkpoint, wait_s=ex.deadlines.first_batch_s)
    # A rollback counts only if the restored run works: it must commit (or idle healthily).
    st = registry.Stage.model_validate(old.config["spec"])
    why_not = wait_first_batch(ex, res.deployment_id, registry.resolve_path(st.source.path), Path(old.checkpoint),
                               stamp=False)
    if why_not:
        raise RuntimeError(f"the restored configuration does not run either: {why_not}")


def execute(reconfiguration_id: int, *, reg: registry.Registry | None = None, mechanism: str | None = None,
            deadlines: Deadlines = Deadlines(), fault: str | None = None,
            progress: Progress = lambda _: None) -> Outcome:
    """Realize one pending reconfiguration. Raises ReconfigurationBusy if another executor holds the stage."""
    reg = reg or registry.load()
    started_mono, started = time.monotonic(), datetime.now(timezone.utc)
    with db.engine().connect() as conn:
        row = conn.execute(db.query("reconfiguration_get"), {"id": reconfiguration_id}).first()
    if row is None:
        raise LookupError(f"no reconfiguration {reconfiguration_id}")
    lock_conn = db.engine().connect()
    if not _try_lock(lock_conn, row.stage_id):
        lock_conn.close()
        raise ReconfigurationBusy(f"stage {row.stage_id} is being reconfigured by another process; "
                                  f"reconfiguration {reconfiguration_id} stays {row.status}")
    try:
        if mechanism is None and row.mechanism is None and row.status == "pending":
            mechanism, why = choose_mechanism(row.action, *_rule_inputs(row))
            progress(f"{row.stage_id}: mechanism {mechanism}: {why}")
            log.info("stage %s: action=choose-mechanism %s reconfiguration=%d: %s", row.stage_id, mechanism,
                     reconfiguration_id, why)
        with db.engine().begin() as conn:
            claimed = conn.execute(db.query("reconfiguration_claim"), {"id": reconfiguration_id, "mechanism": mechanism}).first()
        if claimed is None:
            raise ReconfigurationBusy(f"reconfiguration {reconfiguration_id} is {row.status}, not pending")
        mech = MECHANISMS.get(claimed.mechanism)
        if mech is None:
            _finish(reconfiguration_id, "failed", f"unknown mechanism {claimed.mechanism!r}; known: {sorted(MECHANISMS)}", None, None)
            raise ValueError(f"unknown mechanism {claimed.mechanism!r}; known: {sorted(MECHANISMS)}")
        ex = Execution(claimed, reg, lock_conn, progress, deadlines, fault)
        progress(f"{row.stage_id}: {claimed.action} {claimed.from_cores}→{claimed.target_cores} cores with {mech.name} "
                 f"(reconfiguration {reconfiguration_id})")
        return _run(ex, mech, started, started_mono)
    finally:
        _unlock(lock_conn, row.stage_id)
        lock_conn.close()


def _run(ex: Execution, mech: Mechanism, started: datetime, started_mono: float) -> Outcome:
    rid = ex.row.id
    try:
        mech.run(ex)
        dep = _deployment(ex.new_deployment_id)
        st = registry.Stage.model_validate(dep.config["spec"])
        why_not = wait_first_batch(ex, dep.id, registry.resolve_path(st.source.path), Path(dep.checkpoint))
        if why_not:
            raise RuntimeError(why_not)
        behind = _wait_caught_up(ex, dep)
        gate_failure = _quality_gate(ex, dep.id)
        if gate_failure:
            raise RuntimeError(gate_failure)
        downtime = _downtime_ms(ex, started)
        outcome = f"{ex.row.action} done with {mech.name}"
        if behind:
            outcome += f"; still {behind} input files behind after {ex.deadlines.caught_up_s:.0f}s"
        _finish(rid, "done", outcome, None, downtime)
        if ex.rollback_copy is not None:
            checkpoint.shutil.rmtree(ex.rollback_copy, ignore_errors=True)
        ex.progress(f"{ex.stage_id}: done; output gap {downtime / 1000:.1f}s")
        return Outcome(rid, ex.stage_id, "done", downtime, time.monotonic() - started_mono, "done")
    except stages.AdmissionRefused as e:
        if ledger.latest_run(ex.stage_id, live=True) is not None and ex.new_deployment_id is None:
            # Nothing changed (e.g. active backup needs room for both runs): the stage runs as before.
            _finish(rid, "cancelled", "refused: the pool lacks cores", str(e), None)
            ex.progress(f"{ex.stage_id}: {e}")
            return Outcome(rid, ex.stage_id, "cancelled", None, time.monotonic() - started_mono, str(e))
        return _rolled_back(ex, mech, str(e), started, started_mono)
    except Exception as e:
        return _rolled_back(ex, mech, str(e).splitlines()[0] if str(e) else type(e).__name__, started, started_mono)


GATE_BATCHES = 5
GATE_METRICS_WAIT_S = 30.0  # the agent's metrics writer retries for longer, but 30 s means it is stuck


def _quality_gate(ex: Execution, dep_id: int) -> str | None:
    """The data-quality gate on the new run's first batches (issue 6): None if they pass, else
    the rollback reason. A run that has committed nothing (an idle source) has nothing to judge."""
    # Judge rows that exist: wait (briefly) for the metrics of the batches the run has committed.
    deadline = time.monotonic() + GATE_METRICS_WAIT_S
    while True:
        with db.engine().connect() as conn:
            metrics, commits = conn.execute(db.query("gate_metrics_ready"), {"deployment_id": dep_id}).first() or (0, 0)
        if commits == 0:
            ex.progress(f"{ex.stage_id}: quality gate skipped: the new run has no output yet (idle source)")
            return None
        if metrics >= min(GATE_BATCHES, commits) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    from streamops import quality  # imported here: Great Expectations takes seconds to import

    gate = quality.gate_new_run(dep_id, first_batches=GATE_BATCHES)
    ex.progress(f"{ex.stage_id}: quality gate {'passed' if gate.passed else 'FAILED'} "
                f"({gate.details.get('elapsed_s', 0):.1f}s)")
    return None if gate.passed else gate.reason


def _rolled_back(ex: Execution, mech: Mechanism, reason: str, started: datetime, started_mono: float) -> Outcome:
    rid = ex.row.id
    try:
        mech.rollback(ex, reason)
        downtime = _downtime_ms(ex, started)
        _finish(rid, "rolled_back", "rolled back to the previous configuration", reason, downtime)
        return Outcome(rid, ex.stage_id, "rolled_back", downtime, time.monotonic() - started_mono, reason)
    except Exception as e2:
        detail = f"{reason}; rollback failed too: {str(e2).splitlines()[0] if str(e2) else type(e2).__name__}"
        _finish(rid, "failed", "failed; the stage may be down: see the watchdog", detail, None)
        log.error("stage %s: action=reconfigure failed: %s", ex.stage_id, detail)
        return Outcome(rid, ex.stage_id, "failed", None, time.monotonic() - started_mono, detail)


def _wait_caught_up(ex: Execution, dep) -> int:
    """Wait until the new run has read the input backlog; 0 then, else the files still unread at
    the deadline. A run still behind is not a failure (the load may simply exceed it) but the
    outcome says so: its latency is the catch-up's, not the new configuration's."""
    st = registry.Stage.model_validate(dep.config["spec"])
    backlog = FileSourceBacklog(registry.resolve_path(st.source.path), Path(dep.checkpoint))
    deadline = time.monotonic() + ex.deadlines.caught_up_s
    files = 0
    while time.monotonic() < deadline:
        files = backlog.measure().files
        if files <= 1:  # one file may arrive at any moment
            ex.stamp("caught_up")
            return 0
        time.sleep(0.5)
    log.warning("stage %s: action=catch-up reconfiguration=%d still %d input files behind after %.0fs",
                ex.stage_id, ex.row.id, files, ex.deadlines.caught_up_s)
    ex.progress(f"{ex.stage_id}: still {files} input files behind after {ex.deadlines.caught_up_s:.0f}s")
    return files


def _finish(rid: int, status: str, outcome: str, rollback_reason: str | None, downtime_ms: float | None) -> None:
    with db.engine().begin() as conn:
        conn.execute(db.query("reconfiguration_finish"), {
            "id": rid, "status": status, "outcome": outcome, "rollback_reason": rollback_reason, "downtime_ms": downtime_ms,
        })


def request(stage_ref: str, action: str, *, cores: int | None = None, partitions: int | None = None,
            pool: str | None = None, mechanism: str = "pause_resume", reg: registry.Registry | None = None,
            requested_by: str | None = None) -> int:
    """Persist a user's reconfiguration as `pending` (first step of every manual change), after
    `plan.change.validate_change`: a refused request records nothing and stops nothing."""
    reg = reg or registry.load()
    if mechanism not in MECHANISMS:
        raise InvalidChange(f"unknown mechanism {mechanism!r}; available: {', '.join(MECHANISMS)}")
    sid = stage_of(reg, stage_ref)
    change = validate_change(reg, sid, action, cores=cores, partitions=partitions, pool=pool,
                             current=stages.current(sid))
    with db.engine().begin() as conn:
        rid = conn.execute(db.query("reconfiguration_user"), {
            "stage_id": sid, "action": change.action, "target_cores": change.cores, "target_pool": change.pool,
            "target_partitions": change.partitions, "mechanism": mechanism,
            "requested_by": requested_by or f"user:{getpass.getuser()}",
        }).scalar()
    if rid is None:
        raise ReconfigurationBusy(f"stage {sid} already has a pending or running reconfiguration (or never ran)")
    return rid


def resume(reg: registry.Registry | None = None, progress: Progress = lambda _: None, *,
           statuses: tuple[str, ...] = ("pending", "running"), stage_ids: Iterable[str] | None = None,
           apps: Iterable[str] | None = None, actions: Iterable[str] | None = None,
           keep_going: Callable[[], bool] = lambda: True) -> list[Outcome]:
    """Finish what a dead executor left: `running` rows whose stage lock is free are rolled back
    to the previous configuration unless the new run already committed; `pending` rows are run.
    The filters narrow it to some stages, apps or actions; `keep_going` is asked before each
    row (a maintenance window that closed stops starting new actions)."""
    reg = reg or registry.load()
    with db.engine().connect() as conn:
        rows = conn.execute(db.query("reconfigurations_to_run"), {
            "statuses": list(statuses), "stages": None if stage_ids is None else list(stage_ids),
            "apps": None if apps is None else list(apps), "actions": None if actions is None else list(actions),
        }).all()
    outcomes = []
    for row in rows:
        if not keep_going():
            progress(f"stopped before reconfiguration {row.id} of {row.stage_id}: no longer allowed to start actions")
            break
        try:
            if row.status == "pending":
                outcomes.append(execute(row.id, reg=reg, progress=progress))
            else:
                outcomes.append(_recover_running(row, reg, progress))
        except ReconfigurationBusy as e:
            progress(str(e))
    return outcomes


def _recover_running(row, reg: registry.Registry, progress: Progress) -> Outcome:
    lock_conn = db.engine().connect()
    if not _try_lock(lock_conn, row.stage_id):
        lock_conn.close()
        raise ReconfigurationBusy(f"reconfiguration {row.id} of {row.stage_id} is still being executed")
    try:
        live = ledger.latest_run(row.stage_id, live=True)
        with db.engine().connect() as conn:
            committed = live is not None and conn.execute(db.query("first_commit_of"), {"deployment_id": live.id}).scalar()
        target_ok = live is not None and (row.target_cores is None or live.cores == row.target_cores) \
            and (row.target_pool is None or live.pool == row.target_pool)
        if target_ok and committed and live.started_at >= row.requested_at:
            _finish(row.id, "done", "completed by --resume: the new run was already committing", None, None)
            progress(f"{row.stage_id}: reconfiguration {row.id} was complete; marked done")
            return Outcome(row.id, row.stage_id, "done", None, 0.0, "completed by resume")
        ex = Execution(row, reg, lock_conn, progress, Deadlines(), None)
        ex.old_deployment = _previous_config(row)
        ckpt = Path(ex.old_deployment.checkpoint) if ex.old_deployment else None
        copy = ckpt.with_name(f"{ckpt.name}.rollback-{row.id}") if ckpt else None
        # Only a complete copy exists under its final name (copy_stopped renames it into place).
        # Without one, the executor died before the new run touched the checkpoint: it is intact.
        ex.rollback_copy = copy if copy is not None and copy.exists() else None
        _rollback(ex, "the executor died mid-way")
        _finish(row.id, "rolled_back", "rolled back by --resume", "the executor died mid-way", None)
        return Outcome(row.id, row.stage_id, "rolled_back", None, 0.0, "the executor died mid-way")
    finally:
        _unlock(lock_conn, row.stage_id)
        lock_conn.close()


def _previous_config(row):
    return ledger.latest_run(row.stage_id, before=row.requested_at)
