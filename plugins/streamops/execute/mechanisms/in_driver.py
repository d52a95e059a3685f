"""in_driver: pause–resume inside the running driver. A `repartition` command makes it stop its
queries at a batch boundary, repartition the state in its own Spark session, restart them with
the new partitions (and, on a standalone pool, the new executors). No new JVM, no first-batch
warm-up. The rollback copy is taken while the query still runs (`copy_live`, as of its last
commit), so it costs no output time; the sink's version guard drops the batches replayed after
a rollback."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Row

from streamops.execute import checkpoint
from streamops.execute.mechanisms.execution import (
    Execution,
    Recovery,
    check_room_to_grow,
    driver_command,
    recover_by_restore,
    restore_previous,
    running_primary,
    same_run_holds_target,
    target_partitions,
)
from streamops.plan.kinds import MechanismName, Phase
from streamops.run_spec import RepartitionArgs
from streamops.store import db, ledger
from streamops.store import reconfigurations as rstore


class InDriver:
    name = MechanismName.IN_DRIVER

    def run(self, ex: Execution) -> None:
        r = ex.row
        live = running_primary(ex)
        pool = ex.reg.pools.get(live.pool)
        check_room_to_grow(ex, live, pool.cores if pool else None, r.target_cores)
        ckpt = Path(live.checkpoint)
        ex.rollback_copy = checkpoint.rollback_copy_live(ckpt, ckpt.with_name(f"{ckpt.name}.rollback-{r.id}"))
        partitions = target_partitions(ex, live)
        ex.stamp(Phase.STOP_REQUESTED)
        ex.changed_at = db.now()  # compared with the commits: the database's clock
        wait_s = ex.deadlines.stop_s + ex.deadlines.first_batch_s
        outcome = driver_command(ex, live, "repartition", RepartitionArgs(
            cores=r.target_cores, partitions=partitions, stop_deadline_s=ex.deadlines.stop_s,
            timeout_s=ex.deadlines.first_batch_s), wait_s)
        if r.target_cores != live.cores:
            ledger.record_scaling(live.id, live.cores, r.target_cores, r.id)
        ex.new_deployment_id = live.id
        rstore.link(r.id, old_deployment_id=live.id, new_deployment_id=live.id)
        ex.progress(f"{ex.stage_id}: {outcome.detail}")

    def rollback(self, ex: Execution, reason: str) -> None:
        """Restart the old configuration from the copy (the driver may be half-way)."""
        restore_previous(ex, reason)

    def recover(self, ex: Execution, live: Row | None) -> Recovery:
        if same_run_holds_target(ex.row, live):  # the driver recorded its new partitions itself
            return Recovery.completed("the run holds the target configuration")
        return recover_by_restore(ex)
