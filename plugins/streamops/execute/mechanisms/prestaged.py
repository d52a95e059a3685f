"""prestaged: scale out from a pre-staged copy. Stop the primary, start from the copy (already
repartitioned), replay the batches since the copy from the source; the idempotent sink drops
what it has seen. Downtime: stop + start, without the copy and the repartition."""

from __future__ import annotations

from sqlalchemy import Row

from streamops.execute import stages
from streamops.execute.mechanisms.execution import (
    Execution,
    Recovery,
    recover_by_restore,
    restore_previous,
    running_primary,
    stop_primary,
    target_partitions,
)
from streamops.execute.staging import prestage, release
from streamops.plan.kinds import MechanismName
from streamops.store import reconfigurations as rstore


class Prestaged:
    name = MechanismName.PRESTAGED

    def run(self, ex: Execution) -> None:
        r = ex.row
        old = running_primary(ex)
        # the staged copy as it is, or a fresh one (reported) if none, the wrong layout or behind
        staged = prestage(ex.stage_id, target_partitions(ex, old), ex.reg, ex.progress)
        rstore.link(r.id, staged_checkpoint=staged.path, old_deployment_id=old.id)
        stop_primary(ex)
        res = stages.start_stage(ex.stage_id, ex.reg, cores=r.target_cores, state_partitions=staged.partitions,
                                 pool=r.target_pool, checkpoint_path=staged.path, wait_s=ex.deadlines.first_batch_s,
                                 reconfiguration_id=r.id, fault=ex.fault, warm_up=False)
        release(ex.stage_id, ex.reg, status="used")
        ex.new_deployment_id = res.deployment_id
        rstore.link(r.id, new_deployment_id=res.deployment_id)

    def rollback(self, ex: Execution, reason: str) -> None:
        restore_previous(ex, reason)  # the old checkpoint was never touched: restart it as it was

    def recover(self, ex: Execution, live: Row | None) -> Recovery:
        return recover_by_restore(ex)
