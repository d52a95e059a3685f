"""What every mechanism shares: the `Mechanism` protocol, the `Situation` a refusal judges, the
`Execution` of one reconfiguration, and the steps several mechanisms take (wait for a run's
first output, stop the primary, send the driver a command, restore the previous configuration).
Every database access goes through `store/`."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from sqlalchemy import Row
from sqlalchemy.exc import OperationalError

from streamops import registry
from streamops.checkpoint_layout import FileSourceBacklog
from streamops.execute import checkpoint, stages
from streamops.plan import mechanisms as rules
from streamops.plan.kinds import Phase, RunStatus
from streamops.run_spec import CommandArgs, CommandOutcome
from streamops.store import ledger
from streamops.store import reconfigurations as rstore
from streamops.waiting import wait_until

log = logging.getLogger("streamops.reconfigure")
Progress = Callable[[str], None]

DRIVER_LOOK_S = 2.0  # while a driver command is awaited, how often its driver's life is checked
DIED = "the executor died mid-way"  # why `resume` rolls back a reconfiguration left running


@dataclass(frozen=True)
class Deadlines:
    stop_s: float = 60.0
    first_batch_s: float = 120.0  # the new run must commit a batch (or be idle and healthy) by then
    caught_up_s: float = 120.0


@dataclass(frozen=True)
class Situation(rules.Situation):
    """The plain situation the cost rule and each rule's `refusal` judge (plan.mechanisms), read
    once under the stage lock, with the live run's row the mechanism then acts on."""

    live: Row | None = None  # the running primary, None when the stage is not running

    @classmethod
    def read(cls, row: Row, reg: registry.Registry) -> Situation:
        live = ledger.latest_run(row.stage_id, live=True)
        pool_name = live.pool if live is not None else row.from_pool
        pool = reg.pools.get(pool_name)
        target_pool = row.target_pool or pool_name
        size = reg.pools[target_pool].cores if target_pool in reg.pools else None
        free, total = ledger.pool_room(target_pool, size)
        return cls(
            action=row.action, running=live is not None, live=live, pool=pool_name,
            pool_kind=pool.kind if pool else "local", executor_cores=pool.executor_cores if pool else 1,
            current_cores=live.cores if live is not None else None, target_pool=row.target_pool,
            target_cores=row.target_cores or row.from_cores or (live.cores if live is not None else 1),
            target_partitions=row.target_partitions,
            state_partitions=checkpoint.state_partitions(Path(live.checkpoint)) if live is not None else None,
            target_pool_free=free, target_pool_total=total,
            staged_ready=rstore.staged_ready(row.stage_id) is not None,
            source_kind=_source_kind(row.stage_id, reg),
        )


def _source_kind(stage_id: str, reg: registry.Registry) -> str:
    try:
        return reg.stage(stage_id)[2].source.kind
    except registry.RegistryError:  # a stage gone from the registry: its pending rows are cancelled elsewhere
        return "files"


@dataclass(frozen=True)
class Recovery:
    """How a mechanism finished a reconfiguration whose executor died (`Mechanism.recover`)."""

    status: RunStatus  # done | rolled_back
    outcome: str  # the row's outcome
    detail: str  # the caller's one line
    rollback_reason: str | None = None

    @classmethod
    def completed(cls, how: str, detail: str = "completed by resume") -> Recovery:
        return cls(RunStatus.DONE, f"completed by --resume: {how}", detail)

    @classmethod
    def rolled_back(cls) -> Recovery:
        return cls(RunStatus.ROLLED_BACK, "rolled back by --resume", DIED, DIED)


class Execution:
    """One reconfiguration being realized: its row, its stage, what was read before acting
    (`situation`; None when a dead executor's row is recovered) and the phase stamps."""

    def __init__(self, row: Row, reg: registry.Registry, progress: Progress, deadlines: Deadlines,
                 fault: str | None, situation: Situation | None = None):
        self.row, self.reg, self.progress, self.deadlines, self.fault = row, reg, progress, deadlines, fault
        self.situation = situation
        self.stage_id = row.stage_id
        self.old_deployment: Row | None = None
        self.new_deployment_id: int | None = None
        self.rollback_copy: Path | None = None
        # a change in the running driver: its first batch is the first after this
        self.changed_at: datetime | None = None
        # an active backup's switch: the new run writes the sink alone from here, so the gate judges
        # its batches after it (before it, the old run's rows share the sink)
        self.switched_at: datetime | None = None

    def stamp(self, phase: Phase, at: datetime | None = None) -> None:
        rstore.stamp(self.row.id, phase, at)
        self.progress(f"{self.stage_id}: reconfiguration {self.row.id}: {phase}")
        log.info("stage %s: action=%s phase=%s reconfiguration=%d", self.stage_id, self.row.action, phase, self.row.id)


class Mechanism(Protocol):
    """How one granted change is carried out. Its pure rule (`plan.mechanisms.RULES`, same name)
    says whether it applies and what outage it costs. `execute.reconfigure` drives every
    mechanism the same way: the rule's `refusal` (None: it applies) → `run` → first batch,
    catch-up, quality gate → done, or `rollback`; `recover` finishes a row whose executor died
    while it was running."""

    @property
    def name(self) -> str: ...

    def run(self, ex: Execution) -> None: ...

    def rollback(self, ex: Execution, reason: str) -> None: ...

    def recover(self, ex: Execution, live: Row | None) -> Recovery: ...


def source_of(dep: Row) -> Path | None:
    """The input directory of a run, from the stage spec it was started with; None: a Kafka topic."""
    return registry.input_dir(registry.Stage.model_validate(dep.config["spec"]))


def source_behind(dep: Row) -> Callable[[], int | None]:
    """How far a run is behind its input, asked again on each call: the files it has not taken,
    or for a Kafka stage the lag in records its driver last reported (None before its first batch)."""
    inputs = source_of(dep)
    if inputs is None:
        return lambda: ledger.beat_backlog_rows(dep.id)
    backlog = FileSourceBacklog(inputs, Path(dep.checkpoint))
    return lambda: backlog.measure().files


def wait_first_output(dep_id: int, timeout_s: float, who: str = "the new run",
                      after: datetime | None = None) -> tuple[datetime | None, bool, str | None]:
    """Wait for a run's first output (after `after`, if given): (when: its first commit, or when
    it ran healthy on an idle source; whether it committed; None) or (None, False, why not).
    Reconfigurations and the watchdog's restarts both judge a new run by this."""
    dep = ledger.deployment(dep_id)
    behind = source_behind(dep)
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
        if d.status == "running" and time.monotonic() > half_time and behind() == 0:
            return d.running_at, False, None  # idle source: nothing to commit, and the run is healthy
        return None

    return wait_until(outcome, timeout_s) or (None, False, f"{who} (deployment {dep_id}) did not commit a batch "
                                                             f"within {timeout_s:.0f}s")


def wait_first_batch(ex: Execution, dep_id: int, stamp: bool = True) -> str | None:
    """None once the new run commits a batch (or runs healthy on an idle source); else why not."""
    first, committed, why_not = wait_first_output(dep_id, ex.deadlines.first_batch_s, after=ex.changed_at)
    if committed and stamp:
        ex.stamp(Phase.FIRST_BATCH_DONE, at=first)  # its commit, not when this wait saw it
    return why_not


def stop_primary(ex: Execution) -> None:
    ex.stamp(Phase.STOP_REQUESTED)
    stages.stop_stage(ex.stage_id, ex.reg, deadline_s=ex.deadlines.stop_s, requested_by=f"reconfiguration {ex.row.id}")
    ex.stamp(Phase.STOPPED)


def running_primary(ex: Execution) -> Row:
    """The stage's live run as read before acting, which the mechanism changes (and rolls back
    to); it must be running."""
    live = ex.situation.live if ex.situation is not None else ledger.latest_run(ex.stage_id, live=True)
    if live is None:
        raise RuntimeError(f"stage {ex.stage_id} is not running: use pause_resume")
    ex.old_deployment = live
    return live


def target_partitions(ex: Execution, old: Row) -> int:
    return ex.row.target_partitions or checkpoint.state_partitions(Path(old.checkpoint)) or old.state_partitions


def check_room_to_grow(ex: Execution, live: Row, pool_cores: int | None, target_cores: int) -> None:
    """A run that grows in place needs the difference free in its pool (admission's rule)."""
    if target_cores <= live.cores:
        return
    free, total = ledger.pool_room(live.pool, pool_cores)
    if free < target_cores - live.cores:
        raise stages.AdmissionRefused(f"start of {ex.stage_id} refused: pool {live.pool!r} has {free} free of "
                                      f"{total} cores; stage {ex.stage_id} needs {target_cores - live.cores} more")


def driver_command(ex: Execution, run: Row, command: str, args: CommandArgs, wait_s: float) -> CommandOutcome:
    """Send a command to the run's driver, naming this reconfiguration, and wait for its outcome,
    which must be `done`."""
    args = args.model_copy(update={"reconfiguration_id": ex.row.id})
    cid = ledger.send_command(ex.stage_id, run.id, command, args, f"reconfiguration {ex.row.id}")
    looked = [time.monotonic()]

    def answered():
        if (c := ledger.command(cid)).done_at is not None:
            return c
        if time.monotonic() - looked[0] >= DRIVER_LOOK_S:  # a dead driver answers nothing: roll back now
            looked[0] = time.monotonic()
            if not stages.is_alive(run):
                raise RuntimeError(f"the driver (deployment {run.id}, pid {run.pid}) died before it carried out "
                                   f"the {command} command")
        return None

    cmd = wait_until(answered, wait_s, 0.25)
    if not cmd:
        raise RuntimeError(f"the driver did not carry out the {command} command within {wait_s:.0f}s")
    outcome = CommandOutcome.parse(cmd.outcome) or CommandOutcome(status="failed", detail="no outcome")
    if not outcome.ok:
        raise RuntimeError(f"the driver could not {command}: {outcome}")
    return outcome


def restore_previous(ex: Execution, reason: str) -> None:
    """Roll back: stop the new run, restore the checkpoint copy, restart the old configuration,
    and require that it works (commits, or idles healthily)."""
    ex.progress(f"{ex.stage_id}: rolling back: {reason}")
    log.warning("stage %s: action=rollback reconfiguration=%d reason=%s", ex.stage_id, ex.row.id, reason)
    if ledger.latest_run(ex.stage_id, live=True) is not None:
        with contextlib.suppress(stages.StageNotRunning):
            stages.stop_stage(ex.stage_id, ex.reg, deadline_s=10, kill_after_s=5, requested_by="rollback")
    old = ex.old_deployment
    if old is None:
        raise RuntimeError("no previous run to roll back to")
    if ex.rollback_copy is not None and ex.rollback_copy.exists():
        checkpoint.restore(ex.rollback_copy, Path(old.checkpoint))
    # The old run's job spec and code too: an upgrade's rollback restores the code that worked.
    res = stages.start_stage(ex.stage_id, ex.reg, cores=old.cores, state_partitions=old.state_partitions,
                             pool=old.pool, checkpoint_path=old.checkpoint, wait_s=ex.deadlines.first_batch_s,
                             warm_up=False, as_run=old)
    why_not = wait_first_batch(ex, res.deployment_id, stamp=False)
    if why_not:
        raise RuntimeError(f"the restored configuration does not run either: {why_not}")


def recover_by_restore(ex: Execution) -> Recovery:
    """A dead executor's change that started a new run (or may have): restart the run from before
    the request, from the rollback copy if one was completed."""
    row = ex.row
    ex.old_deployment = ledger.latest_run(row.stage_id, before=row.requested_at)
    ckpt = Path(ex.old_deployment.checkpoint) if ex.old_deployment else None
    copy = ckpt.with_name(f"{ckpt.name}.rollback-{row.id}") if ckpt else None
    # Only a complete copy exists under its final name (copy_stopped renames it into place).
    # Without one, the executor died before the new run touched the checkpoint: it is intact.
    ex.rollback_copy = copy if copy is not None and copy.exists() else None
    restore_previous(ex, DIED)
    return Recovery.rolled_back()


def same_run_holds_target(row: Row, live: Row | None) -> bool | None:
    """For a change made in the running driver: None when the run that was changed is gone (a new
    run or none), else whether it holds the target (an in-driver one records its partitions itself)."""
    if live is None or live.started_at >= row.requested_at:
        return None
    return live.cores == row.target_cores and row.target_partitions in (None, live.state_partitions)
