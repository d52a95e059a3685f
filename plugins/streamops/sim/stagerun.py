"""A stage's state in a simulation run: its reconfiguration in progress and its per-second series.

Below both `engine` (which steps it) and `model` (the configuration it is built from): a scripted
change (SimConfig.scripted, sim/calibrate.py) is started here, on the stage, without the engine.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streamops.plan.model import OperatorState
from streamops.sim.ha import StageHA
from streamops.sim.model import ScriptedChange, StageSpec


@dataclass
class Reconfig:
    t: float  # granted at
    stage: str
    action: str
    from_cores: int
    to_cores: int
    mechanism: str
    downtime_s: float
    down_start: float
    down_end: float
    reason: str = ""
    pool: str | None = None
    urgent: bool = False
    backlog_before: float = 0.0  # at the grant: the catch-up ends when the backlog is back to it

    def as_dict(self) -> dict[str, Any]:
        return {"t_s": self.t, "stage": self.stage, "action": self.action, "from_cores": self.from_cores,
                "to_cores": self.to_cores, "mechanism": self.mechanism, "downtime_s": round(self.downtime_s, 3),
                "pool": self.pool, "urgent": self.urgent, "reason": self.reason}


@dataclass
class StageRun:
    spec: StageSpec
    n: int
    cores: np.ndarray
    backlog: np.ndarray
    latency: np.ndarray
    latency_p90: np.ndarray
    busy: np.ndarray
    processed: np.ndarray
    arrivals: np.ndarray
    up: np.ndarray
    ha: StageHA
    pool: str = "local"
    backlog_now: float = 0.0
    restart_t: float = -math.inf  # end of the last downtime
    pending: Reconfig | None = None  # a reconfiguration in progress
    overlap_until: float = -math.inf  # active backup: secondary running until then
    op_state: OperatorState = field(default_factory=OperatorState)
    prestage_ready_at: float | None = None  # a granted pre-staged copy, usable from then on
    catching_up: Reconfig | None = None  # restarted, its backlog not yet back to normal

    def busy_until(self) -> float:
        return self.pending.down_end if self.pending else -math.inf

    def advance_reconfig(self, t: int) -> None:
        """End the reconfiguration in progress if its restart is done by second t."""
        p = self.pending
        if p is None or t < p.down_end:
            return
        # the restart is done at down_end: new cores from here on, stabilization begins
        self.n = p.to_cores
        if p.pool:
            self.pool = p.pool
        self.restart_t = p.down_end
        self.pending = None
        self.op_state = OperatorState()  # the staged copy (if any) was consumed by the restart
        self.prestage_ready_at = None
        self.catching_up = p


def apply_scripted(scripted: Iterable[ScriptedChange], stages: Sequence[StageRun], reconfigs: list[Reconfig],
                   t: int) -> None:
    """Start the scripted changes due in [t, t+1) (Simulation.run calls this instead of the managers);
    each one started is appended to `reconfigs`."""
    for c in scripted:
        if t <= c.t_s < t + 1:
            st = next(s for s in stages if s.spec.name == c.stage)
            if st.pending is not None:  # a failure during a change: that change ends first
                st.advance_reconfig(int(math.ceil(st.pending.down_end)))
            start = max(c.t_s, c.t_s if c.down_start_s is None else c.down_start_s)
            st.pending = Reconfig(t=c.t_s, stage=c.stage, action=c.action, from_cores=st.n, to_cores=c.to_cores,
                                  mechanism=c.mechanism, downtime_s=c.downtime_s, down_start=start,
                                  down_end=start + c.downtime_s, reason="scripted")
            reconfigs.append(st.pending)
