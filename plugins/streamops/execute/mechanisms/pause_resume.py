"""pause_resume: stop at a batch boundary, copy the checkpoint for rollback, restart with the new
cores, partitions or pool. The new driver repartitions the state offline before it starts."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Row

from streamops.execute import checkpoint, stages
from streamops.execute.mechanisms.execution import (
    Execution,
    Recovery,
    recover_by_restore,
    restore_previous,
    target_partitions,
)
from streamops.plan.kinds import MechanismName, Phase
from streamops.store import ledger
from streamops.store import reconfigurations as rstore


class PauseResume:
    name = MechanismName.PAUSE_RESUME

    def run(self, ex: Execution) -> None:
        r = ex.row
        live = ex.situation.live if ex.situation is not None else ledger.latest_run(ex.stage_id, live=True)
        old = live or ledger.latest_run(ex.stage_id)
        if old is None:
            raise RuntimeError(f"stage {ex.stage_id} has never run: nothing to reconfigure")
        ex.old_deployment = old
        ckpt = Path(old.checkpoint)
        ex.stamp(Phase.STOP_REQUESTED)
        if live is not None:
            stages.stop_stage(ex.stage_id, ex.reg, deadline_s=ex.deadlines.stop_s,
                              requested_by=f"reconfiguration {r.id}")
        ex.stamp(Phase.STOPPED)
        if ckpt.exists():
            ex.rollback_copy = checkpoint.copy_stopped(ckpt, ckpt.with_name(f"{ckpt.name}.rollback-{r.id}"))
        res = stages.start_stage(
            ex.stage_id, ex.reg, cores=r.target_cores, state_partitions=target_partitions(ex, old), pool=r.target_pool,
            wait_s=ex.deadlines.first_batch_s, reconfiguration_id=r.id, fault=ex.fault, warm_up=False,
        )
        ex.new_deployment_id = res.deployment_id
        rstore.link(r.id, old_deployment_id=old.id, new_deployment_id=res.deployment_id)

    def rollback(self, ex: Execution, reason: str) -> None:
        restore_previous(ex, reason)

    def recover(self, ex: Execution, live: Row | None) -> Recovery:
        return recover_by_restore(ex)
