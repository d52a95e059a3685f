"""Which mechanism carries out a simulated reconfiguration, and what it costs.

The choice is production's: the simulated stage is described as the plain `Situation` the
executor reads under the stage lock, and `plan.mechanisms.choose` picks from every registered
mechanism, as `execute.reconfigure` does. What the simulator adds is each mechanism's outage
(and an active backup's overlap), drawn from SimConfig's lognormal medians; a mechanism it has
no model of (a newly registered one) costs its rule's estimate.
"""

from __future__ import annotations

import random

from streamops.plan.change import Current, StageNow
from streamops.plan.kinds import MechanismName
from streamops.plan.mechanisms import Situation, choose
from streamops.plan.model import MIGRATE, Request
from streamops.sim.model import SimConfig, lognormal
from streamops.sim.stagerun import StageRun


def situation(cfg: SimConfig, st: StageRun, r: Request, target: int, staged_ready: bool) -> Situation:
    """A simulated stage as the executor would read it: a running driver on a pool of
    `cfg.pool_kind` (1-core executors on a standalone one), a file source, and room for the new
    run beside the old one in the target pool when `cfg.mechanism` is "active_backup" (none when
    it is "pause_resume")."""
    room = target if cfg.mechanism == MechanismName.ACTIVE_BACKUP else 0
    return Situation(
        action=r.action, running=True, pool=st.pool, pool_kind=cfg.pool_kind, executor_cores=1, current_cores=st.n,
        target_pool=r.target_pool if r.action == MIGRATE else None, target_cores=target, target_partitions=None,
        state_partitions=_partitions(st), target_pool_free=room, target_pool_total=room, staged_ready=staged_ready)


def stage_now(cfg: SimConfig, st: StageRun) -> StageNow:
    """The simulated stage as re-plan reads it before it grants (plan.change.StageNow)."""
    return StageNow(Current(st.n, st.pool, _partitions(st)), pool_kind=cfg.pool_kind, executor_cores=1)


def _partitions(st: StageRun) -> int | None:
    return st.spec.state_partitions if st.spec.state_bytes > 0 else None  # a stateless stage has none


def carry_out(cfg: SimConfig, st: StageRun, r: Request, target: int, staged_ready: bool,
              rng: random.Random) -> tuple[str, float, float]:
    """(mechanism, overlap_s, downtime_s) of the change: production's choice, the simulator's outage."""
    choice = choose(situation(cfg, st, r, target, staged_ready))
    mech, sigma = choice.mechanism, cfg.downtime_sigma
    if mech == MechanismName.ACTIVE_BACKUP:
        overlap = lognormal(rng, cfg.overlap_median_s, sigma)  # the secondary catching up, both runs' cores
        return mech, overlap, lognormal(rng, cfg.active_backup_median_s, sigma)
    if mech == MechanismName.PRESTAGED:
        return mech, 0.0, lognormal(rng, cfg.prestaged_median_s, sigma)
    if mech == MechanismName.PAUSE_RESUME:
        downtime = lognormal(rng, cfg.pause_resume_median_s, sigma) + st.spec.state_bytes / 1e6 * cfg.state_s_per_mb
        if r.action == MIGRATE:
            downtime += lognormal(rng, cfg.migrate_extra_median_s, sigma)  # the checkpoint copied to the other pool
        return mech, 0.0, downtime
    return mech, 0.0, lognormal(rng, choice.estimate.seconds, sigma)
