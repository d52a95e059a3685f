"""Expected downtime of a reconfiguration, learned per stage and action from history, with the
state size as covariate; a prior before the first measurement."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

# Priors (ms): stop + restart of a local Spark driver measured about 10 s on 2 cores; a
# migration adds copying the checkpoint. Ours, not the papers'; replaced as soon as history exists.
PRIOR_MS = {"scale_out": 10_000.0, "scale_in": 10_000.0, "migrate": 15_000.0}
PRIOR_MS_PER_MB = 5.0


@dataclass(frozen=True)
class Observation:
    stage_id: str
    action: str
    state_bytes: float
    downtime_ms: float


class CostModel:
    """Least squares `downtime = a + b·state_MB` per (stage, action) with ≥ 2 distinct sizes;
    the mean with fewer; then the same per action over all stages; then the prior."""

    def __init__(self, history: Iterable[Observation] = ()):
        self.by_stage: dict[tuple[str, str], list[Observation]] = defaultdict(list)
        self.by_action: dict[str, list[Observation]] = defaultdict(list)
        for o in history:
            self.add(o)

    def add(self, o: Observation) -> None:
        self.by_stage[(o.stage_id, o.action)].append(o)
        self.by_action[o.action].append(o)

    def __call__(self, stage_id: str, action: str, state_bytes: float) -> float:
        return self.estimate(stage_id, action, state_bytes)

    def estimate(self, stage_id: str, action: str, state_bytes: float) -> float:
        for obs in (self.by_stage.get((stage_id, action)), self.by_action.get(action)):
            if obs:
                return max(0.0, _fit(obs, state_bytes / 1e6))
        return PRIOR_MS.get(action, 10_000.0) + PRIOR_MS_PER_MB * state_bytes / 1e6


def _fit(obs: list[Observation], x: float) -> float:
    xs = [o.state_bytes / 1e6 for o in obs]
    ys = [o.downtime_ms for o in obs]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((a - mx) ** 2 for a in xs)
    if len(obs) < 2 or sxx == 0:
        return my
    slope = sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sxx
    return my + max(0.0, slope) * (x - mx)  # downtime never shrinks with more state
