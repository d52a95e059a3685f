"""Reconfiguration mechanisms (POLICIES.md §5): how one granted change is carried out.

    live           on a standalone cluster: the running driver adds or removes executors
    in_driver      the running driver stops its query at a batch boundary, repartitions the state
                   in its own session and restarts the query (and changes its executors): no new JVM
    pause_resume   stop at a batch boundary, copy the checkpoint for rollback, restart with the
                   new cores/partitions/pool (the new driver repartitions the state offline)
    prestaged      stop, start from a copy staged (and repartitioned) beforehand
    active_backup  start a secondary beside the primary, switch when it has caught up

Each has `run` and `rollback`; `execute.reconfigure` drives them (claim, phases, gate,
downtime, outcome). Every database access goes through `store/`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Protocol

from sqlalchemy import Row
from sqlalchemy.exc import OperationalError

from streamops import registry
from streamops.agent.metrics import FileSourceBacklog
from streamops.execute import checkpoint, stages
from streamops.execute.staging import prestage, release
from streamops.plan.mechanism import in_driver_refusal, live_refusal
from streamops.store import ledger
from streamops.store import reconfigurations as rstore
from streamops.waiting import wait_until

log = logging.getLogger("streamops.reconfigure")
Progress = Callable[[str], None]

# An active backup's secondary may take this many catch-up deadlines while it keeps gaining.
ACTIVE_BACKUP_MAX_WAIT_FACTOR = 5


@dataclass(frozen=True)
class Deadlines:
    stop_s: float = 60.0
    first_batch_s: float = 120.0  # the new run must commit a batch (or be idle and healthy) by then
    caught_up_s: float = 120.0


class Execution:
    """One reconfiguration being realized: its row, its stage, and the phase stamps."""

    def __init__(self, row: Row, reg: registry.Registry, progress: Progress, deadlines: Deadlines, fault: str | None):
        self.row, self.reg, self.progress, self.deadlines, self.fault = row, reg, progress, deadlines, fault
        self.stage_id = row.stage_id
        self.old_deployment: Row | None = None
        self.new_deployment_id: int | None = None
        self.rollback_copy: Path | None = None
        self.changed_at: datetime | None = None  # a live change: its first batch is the first after this

    def stamp(self, phase: str) -> None:
        rstore.stamp(self.row.id, phase)
        self.progress(f"{self.stage_id}: reconfiguration {self.row.id}: {phase}")
        log.info("stage %s: action=%s phase=%s reconfiguration=%d", self.stage_id, self.row.action, phase, self.row.id)


class Mechanism(Protocol):
    name: str

    def run(self, ex: Execution) -> None: ...

    def rollback(self, ex: Execution, reason: str) -> None: ...


def source_of(dep: Row) -> Path:
    """The input directory of a run, from the stage spec it was started with."""
    return registry.resolve_path(registry.Stage.model_validate(dep.config["spec"]).source.path)


def wait_first_output(dep_id: int, timeout_s: float, who: str = "the new run",
                      after: datetime | None = None) -> tuple[datetime | None, bool, str | None]:
    """Wait for a run's first output (after `after`, if given): (when: its first commit, or when
    it ran healthy on an idle source; whether it committed; None) or (None, False, why not).
    Reconfigurations and the watchdog's restarts both judge a new run by this."""
    dep = ledger.deployment(dep_id)
    backlog = FileSourceBacklog(source_of(dep), Path(dep.checkpoint))
    launcher = stages.launcher_for(dep.master)
    half_time = time.monotonic() + timeout_s / 2

    def outcome():
        try:
            first = ledger.first_commit(dep_id, after)
            d = ledger.deployment(dep_id)
        except OperationalError as e:  # the database away for a while (a restart): keep waiting
            log.warning("action=wait-first-output deployment=%d: the database is away, still waiting: %s", dep_id,
                        str(e.orig).strip().splitlines()[0] if str(e.orig).strip() else type(e).__name__)
            return None
        if first is not None:
            return first, True, None
        if d.status in ("failed", "stopped") or (d.pid and not launcher.is_alive(d.pid, d.driver_id)):
            time.sleep(1)  # let the driver record its own reason
            return None, False, f"{who} (deployment {dep_id}) failed before its first commit: " \
                                f"{ledger.deployment(dep_id).stop_reason or 'driver exited'}"
        if d.status == "running" and time.monotonic() > half_time and backlog.measure().files == 0:
            return d.running_at, False, None  # idle source: nothing to commit, and the run is healthy
        return None

    return wait_until(outcome, timeout_s) or (None, False, f"{who} (deployment {dep_id}) did not commit a batch "
                                                             f"within {timeout_s:.0f}s")


def wait_first_batch(ex: Execution, dep_id: int, stamp: bool = True) -> str | None:
    """None once the new run commits a batch (or runs healthy on an idle source); else why not."""
    _, committed, why_not = wait_first_output(dep_id, ex.deadlines.first_batch_s, after=ex.changed_at)
    if committed and stamp:
        ex.stamp("first_batch_done")
    return why_not


def _stop_primary(ex: Execution) -> None:
    ex.stamp("stop_requested")
    stages.stop_stage(ex.stage_id, ex.reg, deadline_s=ex.deadlines.stop_s, requested_by=f"reconfiguration {ex.row.id}")
    ex.stamp("stopped")


def _running_primary(ex: Execution) -> Row:
    """The stage's live run, which the mechanism changes (and rolls back to); it must be running."""
    live = ledger.latest_run(ex.stage_id, live=True)
    if live is None:
        raise RuntimeError(f"stage {ex.stage_id} is not running: use pause_resume")
    ex.old_deployment = live
    return live


def _target_partitions(ex: Execution, old: Row) -> int:
    return ex.row.target_partitions or checkpoint.state_partitions(Path(old.checkpoint)) or old.state_partitions


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
        res = stages.start_stage(
            ex.stage_id, ex.reg, cores=r.target_cores, state_partitions=_target_partitions(ex, old), pool=r.target_pool,
            wait_s=ex.deadlines.first_batch_s, reconfiguration_id=r.id, fault=ex.fault,
        )
        ex.new_deployment_id = res.deployment_id
        rstore.link(r.id, old_deployment_id=old.id, new_deployment_id=res.deployment_id)

    def rollback(self, ex: Execution, reason: str) -> None:
        restore_previous(ex, reason)


class Prestaged:
    """Scale out from a pre-staged copy: stop the primary, start from the copy (already
    repartitioned), replay the batches since the copy from the source; the idempotent sink
    drops what it has seen. Downtime: stop + start, without the copy and the repartition."""

    name = "prestaged"

    def run(self, ex: Execution) -> None:
        r = ex.row
        old = _running_primary(ex)
        # the staged copy as it is, or a fresh one (reported) if none, the wrong layout or behind
        staged = prestage(ex.stage_id, _target_partitions(ex, old), ex.reg, ex.progress)
        rstore.link(r.id, staged_checkpoint=staged.path, old_deployment_id=old.id)
        _stop_primary(ex)
        res = stages.start_stage(ex.stage_id, ex.reg, cores=r.target_cores, state_partitions=staged.partitions,
                                 pool=r.target_pool, checkpoint_path=staged.path, wait_s=ex.deadlines.first_batch_s,
                                 reconfiguration_id=r.id, fault=ex.fault)
        release(ex.stage_id, ex.reg, status="used")
        ex.new_deployment_id = res.deployment_id
        rstore.link(r.id, new_deployment_id=res.deployment_id)

    def rollback(self, ex: Execution, reason: str) -> None:
        restore_previous(ex, reason)  # the old checkpoint was never touched: restart it as it was


class ActiveBackup:
    """[001] Secondary execution: start a secondary from a staged copy with the new
    configuration while the primary runs (both write to the idempotent sink); when the
    secondary has taken every input file the primary has, stop the primary. Output gap ≈ 0,
    at the price of both runs' cores during the overlap."""

    name = "active_backup"

    def run(self, ex: Execution) -> None:
        r = ex.row
        old = _running_primary(ex)
        # No copy for a secondary that cannot start (start_stage checks again, under the pool lock).
        pool, cores = r.target_pool or old.pool, r.target_cores or old.cores
        free, total = ledger.pool_room(pool, ex.reg.pools[pool].cores if pool in ex.reg.pools else None)
        if free < cores:
            raise stages.AdmissionRefused(f"start of {ex.stage_id} refused: pool {pool!r} has {free} free of {total} "
                                          f"cores; stage {ex.stage_id} needs {cores} beside the running one")
        staged = prestage(ex.stage_id, _target_partitions(ex, old), ex.reg, ex.progress)
        rstore.link(r.id, staged_checkpoint=staged.path, old_deployment_id=old.id)
        res = stages.start_stage(ex.stage_id, ex.reg, cores=r.target_cores, state_partitions=staged.partitions,
                                 pool=r.target_pool, checkpoint_path=staged.path, role="secondary",
                                 wait_s=ex.deadlines.first_batch_s, reconfiguration_id=r.id, fault=ex.fault)
        release(ex.stage_id, ex.reg, status="used")
        ex.new_deployment_id = res.deployment_id
        rstore.link(r.id, new_deployment_id=res.deployment_id)
        self._wait_secondary_caught_up(ex, old, ledger.deployment(res.deployment_id))
        _stop_primary(ex)
        ledger.promote(res.deployment_id)

    @staticmethod
    def _wait_secondary_caught_up(ex: Execution, old: Row, new: Row) -> None:
        """The primary keeps serving while the secondary catches up, so waiting costs only cores:
        wait as long as the secondary gains on the primary, up to ACTIVE_BACKUP_MAX_WAIT_FACTOR deadlines."""
        inputs = source_of(new)
        primary_log, secondary_log = FileSourceBacklog(inputs, Path(old.checkpoint)), FileSourceBacklog(inputs, Path(new.checkpoint))
        started = time.monotonic()
        best, gained_at = None, started
        limit = ex.deadlines.caught_up_s

        def caught_up() -> bool:
            nonlocal best, gained_at
            behind = primary_log.seen() - secondary_log.seen()
            if behind <= 0 and checkpoint.last_committed_batch(Path(new.checkpoint)) is not None:
                return True
            now = time.monotonic()
            if best is None or behind < best:
                best, gained_at = behind, now
            if now - gained_at > limit or now - started > ACTIVE_BACKUP_MAX_WAIT_FACTOR * limit:
                raise RuntimeError(f"the secondary (deployment {new.id}) did not reach the primary's input: "
                                   f"{behind} files behind after {now - started:.0f}s, "
                                   f"{now - gained_at:.0f}s without gaining")
            d = ledger.deployment(new.id)
            if d.status not in ("starting", "running"):
                raise RuntimeError(f"the secondary (deployment {new.id}) stopped: {d.stop_reason}")
            return False

        wait_until(caught_up, float("inf"))

    def rollback(self, ex: Execution, reason: str) -> None:
        """The primary was never stopped (unless the switch failed after it): stop the secondary."""
        try:
            stages.stop_stage(ex.stage_id, ex.reg, deadline_s=10, kill_after_s=5, role="secondary", requested_by="rollback")
        except stages.StageNotRunning:
            pass
        if ledger.latest_run(ex.stage_id, live=True) is None:
            restore_previous(ex, reason)


class LiveScale:
    """Change a running stage's cores on a standalone cluster without stopping it: a `scale`
    command to its driver, which adds or removes executors (`spark_apps/executors.py`) while its
    query runs. Valid while `plan.mechanism.live_refusal` says so: same pool, same state
    partitions (key groups), whole executors."""

    name = "live"
    COMMAND_WAIT_S = 90.0

    def run(self, ex: Execution) -> None:
        r = ex.row
        live = _running_primary(ex)
        pool = ex.reg.pools.get(live.pool)
        why = live_refusal(r.action, pool.kind if pool else "local", live.pool, r.target_pool, r.target_cores,
                           pool.executor_cores if pool else 1, checkpoint.state_partitions(Path(live.checkpoint)),
                           r.target_partitions)
        if why:
            raise stages.AdmissionRefused(f"not a live change: {why}")
        _check_room_to_grow(ex, live, pool.cores, r.target_cores)
        self._scale(ex, live, r.target_cores)
        ex.new_deployment_id = live.id
        rstore.link(r.id, old_deployment_id=live.id, new_deployment_id=live.id)

    def _scale(self, ex: Execution, run: Row, cores: int) -> None:
        ex.stamp("scale_requested")
        ex.changed_at = datetime.now(timezone.utc)
        cmd = _driver_command(ex, run, "scale", {"cores": cores, "timeout_s": self.COMMAND_WAIT_S - 15},
                              self.COMMAND_WAIT_S)
        ledger.record_scaling(run.id, run.cores, cores, ex.row.id)
        ex.stamp("executors_ready")
        ex.progress(f"{ex.stage_id}: {cmd.outcome.removeprefix('done: ')}")

    def rollback(self, ex: Execution, reason: str) -> None:
        """Back to the old cores in the same run if it still runs; else restart it as it was."""
        old = ex.old_deployment
        live = ledger.latest_run(ex.stage_id, live=True)
        if old is not None and live is not None and live.id == old.id:
            if live.cores != old.cores:
                self._scale(ex, live, old.cores)
            return
        restore_previous(ex, reason)


class InDriver:
    """Pause–resume inside the running driver: a `repartition` command makes it stop its queries
    at a batch boundary, repartition the state in its own Spark session, restart them with the new
    partitions (and, on a standalone pool, the new executors). No new JVM, no first-batch warm-up.
    The rollback copy is taken while the query still runs (`copy_live`, as of its last commit), so
    it costs no output time; the sink's version guard drops the batches replayed after a rollback."""

    name = "in_driver"

    def run(self, ex: Execution) -> None:
        r = ex.row
        live = _running_primary(ex)
        pool = ex.reg.pools.get(live.pool)
        why = in_driver_refusal(r.action, pool.kind if pool else "local", live.pool, r.target_pool, live.cores,
                                r.target_cores, pool.executor_cores if pool else 1)
        if why:
            raise stages.AdmissionRefused(f"not an in-driver change: {why}")
        _check_room_to_grow(ex, live, pool.cores if pool else None, r.target_cores)
        ckpt = Path(live.checkpoint)
        ex.rollback_copy = checkpoint.rollback_copy_live(ckpt, ckpt.with_name(f"{ckpt.name}.rollback-{r.id}"))
        partitions = _target_partitions(ex, live)
        ex.stamp("stop_requested")
        ex.changed_at = datetime.now(timezone.utc)
        wait_s = ex.deadlines.stop_s + ex.deadlines.first_batch_s
        cmd = _driver_command(ex, live, "repartition", {
            "cores": r.target_cores, "partitions": partitions, "reconfiguration_id": r.id,
            "stop_deadline_s": ex.deadlines.stop_s, "timeout_s": ex.deadlines.first_batch_s}, wait_s)
        if r.target_cores != live.cores:
            ledger.record_scaling(live.id, live.cores, r.target_cores, r.id)
        ex.new_deployment_id = live.id
        rstore.link(r.id, old_deployment_id=live.id, new_deployment_id=live.id)
        ex.progress(f"{ex.stage_id}: {cmd.outcome.removeprefix('done: ')}")

    def rollback(self, ex: Execution, reason: str) -> None:
        """Restart the old configuration from the copy (the driver may be half-way)."""
        restore_previous(ex, reason)


def _check_room_to_grow(ex: Execution, live: Row, pool_cores: int | None, target_cores: int) -> None:
    """A run that grows in place needs the difference free in its pool (admission's rule)."""
    if target_cores <= live.cores:
        return
    free, total = ledger.pool_room(live.pool, pool_cores)
    if free < target_cores - live.cores:
        raise stages.AdmissionRefused(f"start of {ex.stage_id} refused: pool {live.pool!r} has {free} free of "
                                      f"{total} cores; stage {ex.stage_id} needs {target_cores - live.cores} more")


def _driver_command(ex: Execution, run: Row, command: str, args: dict, wait_s: float) -> Row:
    """Send a command to the run's driver and wait for its outcome, which must start with 'done'."""
    cid = ledger.send_command(ex.stage_id, run.id, command, args, f"reconfiguration {ex.row.id}")
    cmd = wait_until(lambda: (c := ledger.command(cid)).done_at is not None and c, wait_s, 0.25)
    if not cmd:
        raise RuntimeError(f"the driver did not carry out the {command} command within {wait_s:.0f}s")
    if not (cmd.outcome or "").startswith("done"):
        raise RuntimeError(f"the driver could not {command}: {cmd.outcome}")
    return cmd


MECHANISMS: dict[str, Mechanism] = {m.name: m for m in (LiveScale(), InDriver(), PauseResume(), Prestaged(),
                                                         ActiveBackup())}


def restore_previous(ex: Execution, reason: str) -> None:
    """Roll back: stop the new run, restore the checkpoint copy, restart the old configuration,
    and require that it works (commits, or idles healthily)."""
    ex.progress(f"{ex.stage_id}: rolling back: {reason}")
    log.warning("stage %s: action=rollback reconfiguration=%d reason=%s", ex.stage_id, ex.row.id, reason)
    if ledger.latest_run(ex.stage_id, live=True) is not None:
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
    why_not = wait_first_batch(ex, res.deployment_id, stamp=False)
    if why_not:
        raise RuntimeError(f"the restored configuration does not run either: {why_not}")
