"""live: change a running stage's cores on a standalone cluster without stopping it. A `scale`
command to its driver adds or removes executors (`spark_apps/executors.py`) while its query
runs. Valid while `plan.mechanism.live_refusal` says so: same pool, same state partitions (key
groups), whole executors."""

from __future__ import annotations

from sqlalchemy import Row

from streamops.execute import stages
from streamops.execute.mechanisms.execution import (
    Execution,
    Recovery,
    check_room_to_grow,
    driver_command,
    recover_by_restore,
    restore_previous,
    running_primary,
    same_run_holds_target,
)
from streamops.plan.kinds import MechanismName, Phase
from streamops.run_spec import ScaleArgs
from streamops.store import db, ledger
from streamops.store import reconfigurations as rstore


class LiveScale:
    name = MechanismName.LIVE
    COMMAND_WAIT_S = 90.0

    def run(self, ex: Execution) -> None:
        r = ex.row
        live = running_primary(ex)
        pool = ex.reg.pools.get(live.pool)
        check_room_to_grow(ex, live, pool.cores if pool else None, r.target_cores)
        self._scale(ex, live, r.target_cores)
        ex.new_deployment_id = live.id
        rstore.link(r.id, old_deployment_id=live.id, new_deployment_id=live.id)

    def _scale(self, ex: Execution, run: Row, cores: int) -> None:
        ex.stamp(Phase.SCALE_REQUESTED)
        outcome = driver_command(ex, run, "scale", ScaleArgs(cores=cores, timeout_s=self.COMMAND_WAIT_S - 15),
                                 self.COMMAND_WAIT_S)
        # The executors have registered: the change's first batch is the first to start from now
        # (a batch in flight ran on the old ones), and its gap is the change's.
        ex.changed_at = db.now()  # compared with the commits: the database's clock
        ledger.record_scaling(run.id, run.cores, cores, ex.row.id)
        ex.stamp(Phase.EXECUTORS_READY)
        ex.progress(f"{ex.stage_id}: {outcome.detail}")

    def rollback(self, ex: Execution, reason: str) -> None:
        """Back to the old cores in the same run if it still runs; else (its driver died, as in
        a kill mid-scale) restart it as it was, now rather than at the watchdog's next pass."""
        old = ex.old_deployment
        live = ledger.latest_run(ex.stage_id, live=True)
        if old is not None and live is not None and live.id == old.id and stages.is_alive(live):
            if live.cores != old.cores:
                self._scale(ex, live, old.cores)
            return
        restore_previous(ex, reason)

    def recover(self, ex: Execution, live: Row | None) -> Recovery:
        """The run that was being scaled kept going: it holds the target, or is scaled back."""
        holds = same_run_holds_target(ex.row, live)
        if holds is None or live is None:  # None when the run is gone (`live` None among them)
            return recover_by_restore(ex)
        if holds:
            return Recovery.completed("the run holds the target configuration")
        if live.cores != ex.row.from_cores:
            self._scale(ex, live, ex.row.from_cores)
        return Recovery.rolled_back()
