"""active_backup ([001] secondary execution): start a secondary from a staged copy with the new
configuration while the primary runs (both write to the idempotent sink); when the secondary
has taken every input file the primary has, stop the primary. Output gap ≈ 0, at the price of
both runs' cores during the overlap."""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path

from sqlalchemy import Row

from streamops.checkpoint_layout import FileSourceBacklog
from streamops.execute import checkpoint, stages
from streamops.execute.mechanisms.execution import (
    Execution,
    Recovery,
    restore_previous,
    running_primary,
    source_of,
    stop_primary,
    target_partitions,
)
from streamops.execute.staging import prestage, release
from streamops.plan.kinds import MechanismName, RunStatus
from streamops.store import db, ledger
from streamops.store import reconfigurations as rstore
from streamops.waiting import wait_until

log = logging.getLogger("streamops.reconfigure")

# The secondary may take this many catch-up deadlines while it keeps gaining.
ACTIVE_BACKUP_MAX_WAIT_FACTOR = 5


class ActiveBackup:
    name = MechanismName.ACTIVE_BACKUP

    def run(self, ex: Execution) -> None:
        r = ex.row
        old = running_primary(ex)
        staged = prestage(ex.stage_id, target_partitions(ex, old), ex.reg, ex.progress)
        rstore.link(r.id, staged_checkpoint=staged.path, old_deployment_id=old.id)
        staged_commit = checkpoint.last_committed_batch(Path(staged.path))
        res = stages.start_stage(ex.stage_id, ex.reg, cores=r.target_cores, state_partitions=staged.partitions,
                                 pool=r.target_pool, checkpoint_path=staged.path, role="secondary",
                                 wait_s=ex.deadlines.first_batch_s, reconfiguration_id=r.id, fault=ex.fault)
        release(ex.stage_id, ex.reg, status="used")
        ex.new_deployment_id = res.deployment_id
        rstore.link(r.id, new_deployment_id=res.deployment_id)
        self._wait_secondary_caught_up(ex, old, ledger.deployment(res.deployment_id), staged_commit)
        stop_primary(ex)
        ex.switched_at = db.now()  # the new run writes alone from here (the database's clock, as its commits)
        ledger.promote(res.deployment_id)

    @staticmethod
    def _wait_secondary_caught_up(ex: Execution, old: Row, new: Row, staged_commit: int | None) -> None:
        """The primary keeps serving while the secondary catches up, so waiting costs only cores:
        wait as long as the secondary gains on the primary, up to ACTIVE_BACKUP_MAX_WAIT_FACTOR deadlines."""
        inputs = source_of(new)
        if inputs is None:  # the secondary's progress is compared by the files its source log took
            raise RuntimeError("active backup compares the runs' file source logs: not built for a Kafka stage")
        primary_log = FileSourceBacklog(inputs, Path(old.checkpoint))
        secondary_log = FileSourceBacklog(inputs, Path(new.checkpoint))
        started = time.monotonic()
        best, gained_at = None, started
        limit = ex.deadlines.caught_up_s

        def planned(run: Row) -> int | None:
            return checkpoint.last_planned_batch(Path(run.checkpoint))

        def caught_up() -> bool:
            nonlocal best, gained_at
            behind = primary_log.seen() - secondary_log.seen()
            # Its source log takes files when a batch is planned, so a version whose state Spark refuses
            # (planned, never committed) would look caught up: it must also have committed a batch of
            # its own, or have nothing planned left (an idle source).
            committed = checkpoint.last_committed_batch(Path(new.checkpoint))
            own = committed is not None and (staged_commit is None or committed > staged_commit)
            if behind <= 0 and (own or (committed is not None and committed == planned(new))):
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
        """Before the switch the primary still serves: stop the secondary. After it (the gate failed
        the promoted run, or the switch failed half-way), restart the old run's checkpoint and code."""
        with contextlib.suppress(stages.StageNotRunning):  # not running as one once promoted
            stages.stop_stage(ex.stage_id, ex.reg, deadline_s=10, kill_after_s=5, role="secondary",
                              requested_by="rollback")
        if ex.switched_at is not None or ledger.latest_run(ex.stage_id, live=True) is None:
            restore_previous(ex, reason)

    def recover(self, ex: Execution, live: Row | None) -> Recovery:
        """The executor died during an active backup. Until the switch the primary serves, and only
        the secondary is stopped: restarting the primary would be the very outage the mechanism
        avoids. Between stopping the primary and promoting the secondary, the secondary (caught up,
        committing) is the stage's only run: it is promoted, not left running unwatched."""
        row = ex.row
        ex.old_deployment = ledger.latest_run(row.stage_id, before=row.requested_at)
        secondary = ledger.deployment(row.new_deployment_id) if row.new_deployment_id is not None else None
        if live is None and secondary is not None and secondary.role == "secondary" \
                and secondary.status in ("starting", "running") and ledger.first_commit(secondary.id) is not None:
            if ex.old_deployment is not None:  # it stopped at a batch boundary; its exit was still awaited
                stages.reap(ex.old_deployment)
            ledger.promote(secondary.id)
            ex.progress(f"{row.stage_id}: reconfiguration {row.id}: the primary had stopped; its secondary "
                        f"(deployment {secondary.id}) is now the primary")
            log.warning("stage %s: action=promote reconfiguration=%d deployment=%d reason=the executor died "
                        "between stopping the primary and promoting the secondary", row.stage_id, row.id, secondary.id)
            return Recovery(RunStatus.DONE,
                            "completed by --resume: the secondary was promoted (the primary had stopped)",
                            "completed by resume: secondary promoted")
        self.rollback(ex, "the executor died mid-way")
        return Recovery.rolled_back()
