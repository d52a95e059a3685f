"""Realize `reconfigurations` rows, one state machine for every mechanism:

    pending ─claim─▶ running ─refusal?─▶ cancelled
                        │ run ─▶ first batch ─▶ catch-up ─▶ quality gate ─▶ done
                        └─ any step fails ─▶ rollback ─▶ rolled_back (or failed)
    running, executor dead ─resume─▶ Mechanism.recover ─▶ done | rolled_back

Each phase is stamped on the row and the output gap (downtime) is measured from the sink's
commits. The mechanisms (execute/mechanisms/) own their rules; nothing here names one.

Persist first, then act: the row is `pending` before anything happens, is claimed atomically
(`running`), and the stage's executor lock is held while acting, so two callers never
reconfigure one stage at once and a dead executor's row can be found and finished (`resume`).
The quality gate is passed in by the caller (`gate=quality.gate_new_run`): execute/ does not
import the data-quality code.
"""

from __future__ import annotations

import getpass
import logging
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import Row

from streamops import registry
from streamops.execute import stages
from streamops.execute.mechanisms import (
    MECHANISMS,
    Deadlines,
    Execution,
    Mechanism,
    Situation,
    source_behind,
    wait_first_batch,
)
from streamops.plan.change import InvalidChange, is_noop, stage_of, validate_change
from streamops.plan.kinds import Action, MechanismName, Phase, RunStatus
from streamops.plan.mechanisms import RULES, choose
from streamops.store import db, ledger
from streamops.store import reconfigurations as rstore
from streamops.waiting import wait_until

log = logging.getLogger("streamops.reconfigure")
Progress = Callable[[str], None]

GATE_BATCHES = 5
GATE_METRICS_WAIT_S = 30.0  # the agent's metrics writer retries for longer, but 30 s means it is stuck
GATE_OUTPUT_WAIT_S = 180.0  # an upgrade's wait for the new version's first sink rows (a window's close)
AUTO = MechanismName.AUTO  # no mechanism named: the cost rule (`plan.mechanisms.choose`), at execution


class ReconfigurationBusy(RuntimeError):
    """Another executor holds the stage."""


class StageBusy(ReconfigurationBusy):
    """The stage lock is held (a recovery, another executor): the row is still `pending`."""


# How long a person's reconfiguration waits for a busy stage (a failover's recovery takes seconds to
# a minute) before it is cancelled: it must not stay pending, to run later when nobody expects it.
BUSY_WAIT_S, BUSY_POLL_S = 60.0, 2.0


class GateVerdict(Protocol):
    """What the gate returns (quality.GateResult, a frozen dataclass): read, never set, here."""

    @property
    def passed(self) -> bool: ...

    @property
    def reason(self) -> str | None: ...

    @property
    def details(self) -> dict[str, Any]: ...


# (a run's deployment id, how many first batches to judge, since=when the change took effect or
# None for a new run's start) → the verdict; quality.gate_new_run
Gate = Callable[..., GateVerdict]


@dataclass(frozen=True)
class Outcome:
    reconfiguration_id: int
    stage_id: str
    status: RunStatus  # done | rolled_back | failed | cancelled
    downtime_ms: float | None
    seconds: float
    detail: str


def request(stage_ref: str, action: str, *, cores: int | None = None, partitions: int | None = None,
            pool: str | None = None, mechanism: str = MechanismName.PAUSE_RESUME, reg: registry.Registry | None = None,
            requested_by: str | None = None) -> int:
    """Persist a user's reconfiguration as `pending` (first step of every manual change), after
    `plan.change.validate_change`: a refused request records nothing and stops nothing.
    `auto`: the cost rule picks the mechanism when it runs, as for a policy's grant."""
    reg = reg or registry.load()
    if mechanism != AUTO and mechanism not in MECHANISMS:
        raise InvalidChange(f"unknown mechanism {mechanism!r}; available: {AUTO}, {', '.join(MECHANISMS)}")
    sid = stage_of(reg, stage_ref)
    change = validate_change(reg, sid, action, cores=cores, partitions=partitions, pool=pool,
                             current=stages.current(sid))
    rid = rstore.create_user_request(sid, change.action, change.cores, change.pool, change.partitions,
                                     # the store writes None (auto) as NULL; its annotation says str
                                     None if mechanism == AUTO else str(mechanism),  # type: ignore[arg-type]
                                     requested_by or f"user:{getpass.getuser()}")
    if rid is None:
        raise ReconfigurationBusy(f"stage {sid} already has a pending or running reconfiguration (or never ran)")
    return rid


def execute(reconfiguration_id: int, *, gate: Gate, reg: registry.Registry | None = None, mechanism: str | None = None,
            deadlines: Deadlines = Deadlines(), fault: str | None = None,
            progress: Progress = lambda _: None) -> Outcome:
    """Realize one pending reconfiguration; `gate` judges the new run's first batches.
    Raises ReconfigurationBusy if another executor holds the stage."""
    reg = reg or registry.load()
    # the start by the database's clock: the change's output gap is measured against the drivers' commits
    started_mono, started = time.monotonic(), db.now()
    row = rstore.get(reconfiguration_id)
    if row is None:
        raise LookupError(f"no reconfiguration {reconfiguration_id}")
    with rstore.stage_lock(row.stage_id) as free:
        if not free:
            raise StageBusy(f"stage {row.stage_id} is being reconfigured or recovered by another process; "
                            f"reconfiguration {reconfiguration_id} stays {row.status}")
        if row.status == RunStatus.PENDING and _is_noop(row, reg):
            # The stage already has the target (a change made meanwhile): no stop, no output gap,
            # and not counted as a reconfiguration (a granted 2→2 once cost 6.7 s of "downtime").
            cur = stages.current(row.stage_id)
            why = ("nothing to change: the stage already runs the registry's job and code" if row.action == "upgrade"
                   else f"nothing to change: the stage already runs with {cur.cores} cores in pool {cur.pool!r}")
            rstore.finish(reconfiguration_id, RunStatus.CANCELLED, why, None, None)
            progress(f"{row.stage_id}: reconfiguration {reconfiguration_id} cancelled: {why}")
            log.info("stage %s: action=cancel reconfiguration=%d %s", row.stage_id, reconfiguration_id, why)
            return Outcome(reconfiguration_id, row.stage_id, RunStatus.CANCELLED, None,
                           time.monotonic() - started_mono, why)
        situation = Situation.read(row, reg)  # once, under the lock: the rule and the refusal judge the same
        if mechanism is None and row.mechanism is None and row.status == RunStatus.PENDING:
            mechanism, why = _choose(situation)
            progress(f"{row.stage_id}: mechanism {mechanism}: {why}")
            log.info("stage %s: action=choose-mechanism %s reconfiguration=%d: %s", row.stage_id, mechanism,
                     reconfiguration_id, why)
        claimed = rstore.claim(reconfiguration_id, mechanism)
        if claimed is None:
            raise ReconfigurationBusy(f"reconfiguration {reconfiguration_id} is {row.status}, not pending")
        mech = MECHANISMS.get(claimed.mechanism)
        if mech is None:
            why = f"unknown mechanism {claimed.mechanism!r}; known: {', '.join(sorted(MECHANISMS))}"
            rstore.finish(reconfiguration_id, RunStatus.FAILED, why, None, None)
            raise ValueError(why)
        ex = Execution(claimed, reg, progress, deadlines, fault, situation)
        progress(f"{row.stage_id}: {claimed.action} {claimed.from_cores}→{claimed.target_cores} cores with {mech.name} "
                 f"(reconfiguration {reconfiguration_id})")
        return _run(ex, mech, gate, started, started_mono)


def execute_requested(reconfiguration_id: int, *, gate: Gate, reg: registry.Registry | None = None,
                      progress: Progress = lambda _: None, busy_wait_s: float | None = None) -> Outcome:
    """Execute the reconfiguration this caller just `request`ed (a person's, from the CLI or a
    DAG's form), or a grant re-plan has this run realize now (a scale-out, through `realize`).
    A busy stage (a recovery, another executor) is waited for up to `busy_wait_s` (BUSY_WAIT_S);
    still busy, the row is cancelled with the reason and ReconfigurationBusy raised. Any other
    end before the row is claimed (an error, the task killed) cancels it too, with what ended
    it: nobody is left with a change to run later unasked. Deferred grants, realized in their
    maintenance window by `resume`, do not come here."""
    wait_s = BUSY_WAIT_S if busy_wait_s is None else busy_wait_s
    ends, said = time.monotonic() + wait_s, 0.0
    try:
        while True:
            try:
                return execute(reconfiguration_id, gate=gate, reg=reg, progress=progress)
            except StageBusy as e:
                left = ends - time.monotonic()
                if left <= 0:
                    raise _cancel_busy(reconfiguration_id, wait_s, progress) from e
                if time.monotonic() - said >= 10:  # a line every 10 s, not every poll
                    said = time.monotonic()
                    progress(f"reconfiguration {reconfiguration_id}: the stage is busy (a recovery or another "
                             f"executor holds it); waiting up to {left:.0f}s more")
                time.sleep(min(BUSY_POLL_S, left))
    except BaseException as e:  # any error, or the task killed (SIGTERM, Ctrl-C), before the row was claimed
        what = f"{type(e).__name__}: {str(e).splitlines()[0]}" if str(e) else type(e).__name__
        try:
            _cancel_unstarted(reconfiguration_id, f"cancelled: the run that asked for it ended before it started "
                                                  f"({what}); nothing was changed; request it again", progress)
        except Exception as cancel_error:  # the database away too: the stale sweep (execute/pending) cancels it
            log.warning("reconfiguration %d: not cancelled now (%s); the stale sweep will", reconfiguration_id,
                        cancel_error)
        raise


def _cancel_unstarted(rid: int, why: str, progress: Progress) -> bool:
    """Cancel `rid` with why if it is still pending (a claimed or finished row is left as it is)."""
    if not rstore.cancel_pending(rid, why):
        return False
    log.warning("reconfiguration %d: action=cancel %s", rid, why)
    progress(f"reconfiguration {rid} {why}")
    return True


def _cancel_busy(rid: int, wait_s: float, progress: Progress) -> ReconfigurationBusy:
    """The row cancelled with why (unless claimed meanwhile), and the error for the caller."""
    why = (f"cancelled: the stage stayed busy for {wait_s:.0f}s (a recovery or another executor held it); "
           "nothing was changed; request it again")
    if _cancel_unstarted(rid, why, progress):
        return ReconfigurationBusy(f"reconfiguration {rid} {why}")
    row = rstore.get(rid)
    return ReconfigurationBusy(f"reconfiguration {rid} was taken over meanwhile: it is {row.status if row else 'gone'}")


def _choose(s: Situation) -> tuple[str, str]:
    """The cost rule (`plan.mechanisms.choose`): the registered mechanism with the smallest
    estimated outage now, and why (the estimate, and why each other one declined)."""
    choice = choose(s)
    return choice.mechanism, choice.why


def _is_noop(row: Row, reg: registry.Registry) -> bool:
    if row.action == "upgrade":
        return stages.code_change(row.stage_id, reg) is None
    return is_noop(stages.current(row.stage_id), row.target_cores, row.target_pool, row.target_partitions)


def _run(ex: Execution, mech: Mechanism, gate: Gate, started: datetime, started_mono: float) -> Outcome:
    rid = ex.row.id
    try:
        why_not = RULES[mech.name].refusal(ex.situation) if ex.situation is not None else None
        if why_not:
            raise stages.AdmissionRefused(why_not)
        mech.run(ex)
        assert ex.new_deployment_id is not None, f"{mech.name} recorded no new run"
        dep = ledger.deployment(ex.new_deployment_id)
        why_not = wait_first_batch(ex, dep.id)
        if why_not:
            raise RuntimeError(why_not)
        behind = _wait_caught_up(ex, dep)
        gate_failure = _quality_gate(ex, dep.id, gate, since=ex.changed_at or ex.switched_at)
        if gate_failure:
            raise RuntimeError(gate_failure)
        downtime, interval = rstore.output_gap(ex.stage_id, started)
        outcome = f"{ex.row.action} done with {mech.name}"
        if behind:
            outcome += f"; still {behind} input files behind after {ex.deadlines.caught_up_s:.0f}s"
        rstore.finish(rid, RunStatus.DONE, outcome, None, downtime, interval)
        if ex.rollback_copy is not None:
            shutil.rmtree(ex.rollback_copy, ignore_errors=True)
        ex.progress(f"{ex.stage_id}: done; output gap {downtime / 1000:.1f}s")
        return Outcome(rid, ex.stage_id, RunStatus.DONE, downtime, time.monotonic() - started_mono, "done")
    except stages.AdmissionRefused as e:
        if ledger.latest_run(ex.stage_id, live=True) is not None and ex.new_deployment_id is None:
            # Nothing changed (the mechanism's refusal, or no room to grow): the stage runs as before.
            rstore.finish(rid, RunStatus.CANCELLED, "refused; the stage runs as before", str(e), None)
            ex.progress(f"{ex.stage_id}: {e}")
            return Outcome(rid, ex.stage_id, RunStatus.CANCELLED, None, time.monotonic() - started_mono, str(e))
        return _rolled_back(ex, mech, str(e), started, started_mono)
    except Exception as e:
        return _rolled_back(ex, mech, str(e).splitlines()[0] if str(e) else type(e).__name__, started, started_mono)


def _quality_gate(ex: Execution, dep_id: int, gate: Gate, since: datetime | None = None) -> str | None:
    """The data-quality gate on the new run's first batches (issue 6), or, for a change made in the
    running driver (live, in_driver), on its first batches `since` the change: None if they pass,
    else the rollback reason. A run that has committed nothing (an idle source) has nothing to judge."""
    # Judge rows that exist: wait (briefly) for the metrics of the batches the run has committed.
    # After an active backup's switch, the run's next commit is a batch away: none yet is not idle.
    def settled() -> tuple[int, int, int] | None:
        metrics, commits, outputs = rstore.gate_progress(dep_id, since)
        if commits == 0:
            return None if ex.switched_at is not None else (metrics, commits, outputs)
        return (metrics, commits, outputs) if metrics >= min(GATE_BATCHES, commits) else None

    ready = wait_until(settled, GATE_METRICS_WAIT_S)
    _, commits, outputs = ready or rstore.gate_progress(dep_id, since)
    if commits == 0:
        ex.progress(f"{ex.stage_id}: quality gate skipped: the new run has no output yet (idle source)")
        return None
    if ex.row.action == Action.UPGRADE and not outputs and _sink_kind(ex) == "postgres":
        # New code is judged on rows it wrote; an append-mode job writes none until its watermark
        # passes a window, and the run serves meanwhile, so waiting costs only the stage's lock.
        ex.progress(f"{ex.stage_id}: quality gate: waiting up to {GATE_OUTPUT_WAIT_S:.0f}s for the new "
                    "version's first sink rows")
        if wait_until(lambda: rstore.gate_progress(dep_id, since)[2] > 0, GATE_OUTPUT_WAIT_S) is None:
            ex.progress(f"{ex.stage_id}: quality gate: the new version wrote no sink row in "
                        f"{GATE_OUTPUT_WAIT_S:.0f}s; judged on its metrics only")
        wait_until(settled, GATE_METRICS_WAIT_S)
    verdict = gate(dep_id, GATE_BATCHES, since=since)
    ex.progress(f"{ex.stage_id}: quality gate {'passed' if verdict.passed else 'FAILED'} "
                f"({verdict.details.get('elapsed_s', 0):.1f}s)")
    return None if verdict.passed else verdict.reason


def _sink_kind(ex: Execution) -> str:
    return ex.reg.stage(ex.stage_id)[2].sink.kind


def _rolled_back(ex: Execution, mech: Mechanism, reason: str, started: datetime, started_mono: float) -> Outcome:
    rid = ex.row.id
    try:
        mech.rollback(ex, reason)
        downtime, interval = rstore.output_gap(ex.stage_id, started)
        rstore.finish(rid, RunStatus.ROLLED_BACK, "rolled back to the previous configuration", reason, downtime,
                      interval)
        return Outcome(rid, ex.stage_id, RunStatus.ROLLED_BACK, downtime, time.monotonic() - started_mono, reason)
    except Exception as e2:
        detail = f"{reason}; rollback failed too: {str(e2).splitlines()[0] if str(e2) else type(e2).__name__}"
        rstore.finish(rid, RunStatus.FAILED, "failed; the stage may be down: see the watchdog", detail, None)
        log.error("stage %s: action=reconfigure failed: %s", ex.stage_id, detail)
        return Outcome(rid, ex.stage_id, RunStatus.FAILED, None, time.monotonic() - started_mono, detail)


def _wait_caught_up(ex: Execution, dep: Row) -> int:
    """Wait until the new run has read the input backlog; 0 then, else the files still unread at
    the deadline. A run still behind is not a failure (the load may simply exceed it) but the
    outcome says so: its latency is the catch-up's, not the new configuration's."""
    behind = source_behind(dep)
    spec = registry.Stage.model_validate(dep.config["spec"]).source
    # One file may arrive at any moment; a topic's lag, one batch's records.
    unit, slack = ("records", spec.max_offsets_per_trigger) if spec.kind == "kafka" else ("input files", 1)
    if wait_until(lambda: (behind() or 0) <= slack, ex.deadlines.caught_up_s):
        ex.stamp(Phase.CAUGHT_UP)
        return 0
    left = behind() or 0
    log.warning("stage %s: action=catch-up reconfiguration=%d still %d %s behind after %.0fs",
                ex.stage_id, ex.row.id, left, unit, ex.deadlines.caught_up_s)
    ex.progress(f"{ex.stage_id}: still {left} {unit} behind after {ex.deadlines.caught_up_s:.0f}s")
    return left


def realize(reconfiguration_id: int, *, gate: Gate, reg: registry.Registry | None = None,
            progress: Progress = lambda _: None, stage_id: str | None = None) -> Outcome:
    """Carry one reconfiguration (of `stage_id`, if given) to its end, whatever it is now: a
    `pending` one is executed, a `running` one whose executor died is recovered, a finished one is
    reported as it ended. Raises ReconfigurationBusy if its executor still holds the stage."""
    reg = reg or registry.load()
    row = rstore.get(reconfiguration_id)
    if row is None:
        raise LookupError(f"no reconfiguration {reconfiguration_id}")
    if stage_id is not None and row.stage_id != stage_id:
        raise ValueError(f"reconfiguration {reconfiguration_id} is of stage {row.stage_id}, not {stage_id}")
    if row.status == RunStatus.PENDING:  # this run is the one that is to realize it: not left pending
        return execute_requested(row.id, gate=gate, reg=reg, progress=progress)
    if row.status == RunStatus.RUNNING:
        return _recover_running(row, reg, progress)
    progress(f"{row.stage_id}: reconfiguration {row.id} already ended {row.status}: {row.outcome}")
    return Outcome(row.id, row.stage_id, RunStatus(row.status), row.downtime_ms, 0.0,
                   row.rollback_reason or row.outcome or row.status)


def resume(reg: registry.Registry | None = None, progress: Progress = lambda _: None, *, gate: Gate | None = None,
           statuses: tuple[str, ...] = (RunStatus.PENDING, RunStatus.RUNNING), stage_ids: Iterable[str] | None = None,
           apps: Iterable[str] | None = None, actions: Iterable[str] | None = None,
           keep_going: Callable[[], bool] = lambda: True) -> list[Outcome]:
    """Finish what a dead executor left: `running` rows whose stage lock is free are rolled back
    to the previous configuration unless the new run already committed; `pending` rows are run
    (with `gate`, required for them). The filters narrow it to some stages, apps or actions;
    `keep_going` is asked before each row (a maintenance window that closed stops starting new actions)."""
    reg = reg or registry.load()
    outcomes = []
    for row in rstore.to_run(statuses, stage_ids, apps, actions):
        if not keep_going():
            progress(f"stopped before reconfiguration {row.id} of {row.stage_id}: no longer allowed to start actions")
            break
        try:
            if row.status == RunStatus.PENDING:
                if gate is None:
                    raise ValueError("pending reconfigurations need a quality gate: pass gate=")
                outcomes.append(execute(row.id, gate=gate, reg=reg, progress=progress))
            else:
                outcomes.append(_recover_running(row, reg, progress))
        except ReconfigurationBusy as e:
            progress(str(e))
    return outcomes


def _recover_running(row: Row, reg: registry.Registry, progress: Progress) -> Outcome:
    """A `running` row whose executor died: done if its new run is already committing, else the
    mechanism's `recover` finishes it (roll back, scale back, or promote)."""
    with rstore.stage_lock(row.stage_id) as free:
        if not free:
            raise ReconfigurationBusy(f"reconfiguration {row.id} of {row.stage_id} is still being executed")
        live = ledger.latest_run(row.stage_id, live=True)
        committed = live is not None and ledger.first_commit(live.id) is not None
        target_ok = live is not None and (row.target_cores is None or live.cores == row.target_cores) \
            and (row.target_pool is None or live.pool == row.target_pool)
        if live is not None and target_ok and committed and live.started_at >= row.requested_at:
            rstore.finish(row.id, RunStatus.DONE, "completed by --resume: the new run was already committing", None,
                          None)
            progress(f"{row.stage_id}: reconfiguration {row.id} was complete; marked done")
            return Outcome(row.id, row.stage_id, RunStatus.DONE, None, 0.0, "completed by resume")
        mech = MECHANISMS.get(row.mechanism) or MECHANISMS[MechanismName.PAUSE_RESUME]  # restores the run from before
        ex = Execution(row, reg, progress, Deadlines(), None)
        rec = mech.recover(ex, live)
        rstore.finish(row.id, rec.status, rec.outcome, rec.rollback_reason, None)
        if rec.status == RunStatus.DONE:
            progress(f"{row.stage_id}: reconfiguration {row.id} was complete; marked done")
        return Outcome(row.id, row.stage_id, rec.status, None, 0.0, rec.detail)
