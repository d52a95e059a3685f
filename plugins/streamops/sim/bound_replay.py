"""The bound's schedules replayed in the simulator (issue 46): each per-interval schedule becomes
SimConfig.scripted changes, so the simulator, with its noise and its backlog, says what the
bound's model predicted for it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from streamops.sim.bound_dp import BoundModel
from streamops.sim.model import ScriptedChange, SimConfig


def scripted(schedule: Sequence[Sequence[int]], model: BoundModel) -> tuple[ScriptedChange, ...]:
    """At each interval's start, every stage whose cores change restarts for the model's mean
    downtime of that action (the bound prices the mean, so the replay uses it too)."""
    out = []
    for w in range(1, len(schedule)):
        for k, s in enumerate(model.stages):
            a, b = int(schedule[w - 1][k]), int(schedule[w][k])
            if a == b:
                continue
            up = b > a
            # the active backup's overlap delays the stop; its double cores are not replayed
            start = w * model.window_s + (s.overlap_s if up else 0.0)
            out.append(ScriptedChange(t_s=float(w * model.window_s), stage=s.name, to_cores=b,
                                      downtime_s=s.scale_out_s if up else s.scale_in_s,
                                      mechanism="prestaged" if up else "pause_resume",
                                      action="scale_out" if up else "scale_in", down_start_s=start))
    return tuple(out)


def replay(schedule: Sequence[Sequence[int]], model: BoundModel, cfg: SimConfig, trace: Any, duration_s: int,
           seed: int = 1) -> tuple[float, int]:
    """(core-hours, seconds above R_max) of the schedule in the simulator, with `seed`'s noise."""
    from streamops.sim.engine import Simulation
    from streamops.sim.policies import resolve_policy

    if tuple(int(c) for c in schedule[0]) != tuple(s.cores for s in cfg.stages):
        raise ValueError("a schedule starts at the simulator's initial cores")
    pc = resolve_policy("recommended")  # not consulted: the scripted changes replace the managers
    sim = Simulation(replace(cfg, scripted=scripted(schedule, model), plot=False), pc.operator, pc.op_opts(),
                     pc.app_opts(), trace, duration_s, seed)
    sim.run()
    return sim.core_seconds / 3600.0, int((np.asarray(sim.response) > cfg.r_max_ms).sum())
