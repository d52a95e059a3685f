"""Reconfiguration rows, the per-stage executor lock, staged checkpoint copies and the output
gap a change caused. SQL is in sql/queries/; deciding and acting is execute/'s job."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Row
from sqlalchemy.exc import OperationalError

from streamops.store import db

log = logging.getLogger("streamops.reconfigurations")

# -- the stage lock ------------------------------------------------------------------------------
class StageLock:
    """The stage's executor lock as `stage_lock` holds it: truthy while held. `pause` lets it go
    for a wait (a launch retry's backoff), so that the stage's other actors are not blocked."""

    def __init__(self, stage_id: str, conn: Connection):
        self.stage_id, self._conn = stage_id, conn
        self.held = self._try()

    def __bool__(self) -> bool:
        return self.held

    def _try(self) -> bool:
        got = bool(self._conn.execute(db.query("reconfiguration_lock_try"), {"stage_id": self.stage_id}).scalar())
        self._conn.commit()
        return got

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        # Explicitly: closing a pooled connection does not end its session, so the lock would outlive us.
        try:
            self._conn.execute(db.query("reconfiguration_unlock"), {"stage_id": self.stage_id})
            self._conn.commit()
        except OperationalError:  # the session is gone (a database restart), and its lock with it
            log.warning("stage %s: the stage lock's session ended with the database; nothing to release",
                        self.stage_id)

    def pause(self, seconds: float) -> bool:
        """Let the lock go for `seconds`, then try to take it back: whether it was (another
        caller may hold it now, and then acts on the stage instead)."""
        self.release()
        time.sleep(seconds)
        self.held = self._try()
        return self.held


@contextlib.contextmanager
def stage_lock(stage_id: str) -> Iterator[StageLock]:
    """Hold the stage's executor lock for a whole action; yields it, truthy when it was free. A
    session-level advisory lock on a connection kept for the duration: reconfigurations and the
    watchdog's restarts take it, so two never act on one stage at once."""
    with db.engine().connect() as conn:
        lock = StageLock(stage_id, conn)
        try:
            yield lock
        finally:
            lock.release()


# -- rows ------------------------------------------------------------------------------------------
def get(rid: int) -> Row[Any] | None:
    return db.row("reconfiguration_get", id=rid)


def claim(rid: int, mechanism: str | None) -> Row[Any] | None:
    """`pending` → `running` atomically (with the mechanism, if it was chosen now); None if not pending."""
    return db.write("reconfiguration_claim", id=rid, mechanism=mechanism)


def stamp(rid: int, phase: str, at: datetime | None = None) -> None:
    """Stamp `phase` at `at` (when it happened), else now."""
    db.write("reconfiguration_phase", id=rid, phase=phase, at=at)


def finish(rid: int, status: str, outcome: str, rollback_reason: str | None, downtime_ms: float | None,
           commit_interval_ms: float | None = None) -> bool:
    """Record the outcome of a reconfiguration in flight; False (and a warning) when it was
    finished already: whoever finished it first (its executor, or a recovery that took it over
    after the stage lock was lost) keeps its word. `commit_interval_ms`: the stage's own, before
    the change (`output_gap`)."""
    done = db.write("reconfiguration_finish", id=rid, status=status, outcome=outcome, rollback_reason=rollback_reason,
                    downtime_ms=downtime_ms, commit_interval_ms=commit_interval_ms) is not None
    if not done:
        log.warning("reconfiguration %d: action=finish refused (%s): it was finished already", rid, status)
    return done


def cancel_pending(rid: int, outcome: str) -> bool:
    """Cancel a reconfiguration that has not started, with why; False when it was claimed (or ended) meanwhile."""
    return db.write("reconfiguration_cancel_pending", id=rid, outcome=outcome) is not None


def cancel_all_pending(outcome: str) -> list[Row[Any]]:
    """Cancel every reconfiguration that has not started, with why; the rows cancelled."""
    with db.transaction() as conn:
        return list(conn.execute(db.query("reconfigurations_cancel_all_pending"), {"outcome": outcome}).all())


def link(rid: int, *, old_deployment_id: int | None = None, new_deployment_id: int | None = None,
         staged_checkpoint: str | None = None) -> None:
    """Record which runs (and staged copy) reconfiguration `rid` used."""
    db.write("reconfiguration_link", id=rid, old_deployment_id=old_deployment_id,
             new_deployment_id=new_deployment_id, staged_checkpoint=staged_checkpoint)


def record_repartition(rid: int, ms: float) -> None:
    """How long the new driver's offline state repartition took."""
    db.write("reconfiguration_repartition", id=rid, ms=ms)


def create_user_request(stage_id: str, action: str, cores: int | None, pool: str | None, partitions: int | None,
                        mechanism: str, requested_by: str) -> int | None:
    """A person's reconfiguration, `pending`; None if the stage already has an active one (or never ran)."""
    r = db.write("reconfiguration_user", stage_id=stage_id, action=action, target_cores=cores, target_pool=pool,
                 target_partitions=partitions, mechanism=mechanism, requested_by=requested_by)
    return r.id if r else None


def to_run(statuses: Iterable[str], stage_ids: Iterable[str] | None, apps: Iterable[str] | None,
           actions: Iterable[str] | None) -> list[Row[Any]]:
    """Reconfigurations in `statuses`, narrowed to some stages, apps or actions (None: all)."""
    def listed(xs: Iterable[str] | None) -> list[str] | None:
        return None if xs is None else list(xs)

    return db.rows("reconfigurations_to_run", statuses=list(statuses), stages=listed(stage_ids), apps=listed(apps),
                   actions=listed(actions))


def active_stage_ids() -> set[str]:
    """Stages with a `running` reconfiguration."""
    return {r.stage_id for r in db.rows("reconfigurations_running")}


# -- measurements ------------------------------------------------------------------------------------
def output_gap(stage_id: str, since: datetime) -> tuple[float, float | None]:
    """(the longest gap between the stage's output commits from its last commit before `since`
    until now, the stage's own commit interval in the minute before `since`), in ms. A change's
    cost is the excess of the first over the second: a live change, or none, shows one interval."""
    with db.connection() as conn:
        before = conn.execute(db.query("last_commit_before"), {"stage_id": stage_id, "ts": since}).scalar()
        gap = conn.execute(db.query("commit_gap"), {
            "stage_id": stage_id, "from_ts": before or since,
            "to_ts": conn.execute(db.query("db_now")).scalar_one() + timedelta(seconds=1),  # the commits' clock
        }).scalar_one()
        interval = conn.execute(db.query("commit_interval"), {"stage_id": stage_id, "ts": since}).scalar()
    return gap, interval



def gate_progress(dep_id: int, since: datetime | None = None) -> tuple[int, int, int]:
    """(metrics rows written, batches committed, sink rows written) by a new run, or by a run since
    a change made in its driver: the gate judges rows that exist."""
    r = db.row("gate_metrics_ready", deployment_id=dep_id, since=since)
    return (r.metrics, r.commits, r.outputs) if r else (0, 0, 0)


# -- staged checkpoint copies ------------------------------------------------------------------------
@dataclass(frozen=True)
class Staged:
    id: int
    path: str
    as_of_batch: int
    partitions: int
    source: str = ""


def staged_ready(stage_id: str) -> Staged | None:
    r = db.row("staged_ready", stage_id=stage_id)
    return Staged(r.id, r.path, r.as_of_batch, r.partitions, r.source) if r else None


def staged_insert(stage_id: str, source: str, path: str, as_of_batch: int, partitions: int) -> Staged:
    r = db.write_returning("staged_insert", stage_id=stage_id, source=source, path=path, as_of_batch=as_of_batch,
                 partitions=partitions)
    return Staged(r.id, r.path, r.as_of_batch, r.partitions, r.source)


def staged_close(staged_id: int, status: str) -> None:
    db.write("staged_close", id=staged_id, status=status)
