"""Expected cost of a reconfiguration, learned per stage, action and mechanism from that stage's
own history (`reconfigurations` and `failures` rows), with the state size as covariate; the
defaults only until enough rows exist.

The cost of one change is its *disruption*: the output gap (last commit before → first commit
after) plus the catch-up (first batch after → backlog back to normal), in ms. A recovery from a
failure restarts the driver from its checkpoint like a pause-resume does, so the stage's
failures inform its pause-resume cost until pause-resumes of its own exist.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from streamops.plan.kinds import MechanismName
from streamops.plan.mechanisms import IN_DRIVER_S, PAUSE_RESUME_S, PRESTAGED_S

# Priors (ms): stop + restart of a local Spark driver measured about 10 s on 2 cores; a
# migration adds copying the checkpoint. Ours, not the papers'; replaced as soon as history exists.
PRIOR_MS = {"scale_out": 10_000.0, "scale_in": 10_000.0, "migrate": 15_000.0}
PRIOR_MS_PER_MB = 5.0
MIN_ROWS = 2  # a stage's per-mechanism estimate needs this many rows; fewer: its rows of any mechanism
RECENT = 20  # per key, only the latest rows count: a stage's cost moves with its cluster and state
RESTART = "restart"  # the action of a failure's recovery
# A restart mechanism's outage over a pause-resume's, as plan.mechanisms ranks them: a change by
# one that no stage has used yet is estimated at the stage's cost of any change × this, not at
# the cost of the pause-resumes it has seen (a staged copy skips the copy and the repartition).
SHARE: dict[str, float] = {MechanismName.PRESTAGED: PRESTAGED_S / PAUSE_RESUME_S,
                           MechanismName.IN_DRIVER: IN_DRIVER_S / PAUSE_RESUME_S}


@dataclass(frozen=True)
class Observation:
    stage_id: str
    action: str  # scale_out | scale_in | migrate | restart (a failure's recovery)
    state_bytes: float
    downtime_ms: float  # the output gap
    mechanism: str | None = None  # pause_resume | prestaged | active_backup | live | in_driver | recovery
    catch_up_ms: float = 0.0  # first batch after the restart → caught up

    @property
    def cost_ms(self) -> float:
        return self.downtime_ms + max(0.0, self.catch_up_ms)


class CostModel:
    """Least squares `cost = a + b·state_MB` (b ≥ 0) over the first level that has rows (the
    mean when the sizes do not vary), in this order:
    1. the stage's own (action, mechanism) rows, when a mechanism is asked for (≥ `min_rows`);
    1b. every stage's (action, mechanism) rows, for a mechanism in SHARE (≥ `min_rows`); without
        them, such a mechanism is the levels below × its SHARE;
    2. the stage's own rows of the action, any mechanism;
    3. the stage's failure recoveries, for a pause-resume (or no mechanism named);
    4. every stage's rows of the action;
    5. the prior."""

    def __init__(self, history: Iterable[Observation] = (), min_rows: int = MIN_ROWS):
        self.min_rows = min_rows
        self.rows: dict[tuple[str | None, ...], list[Observation]] = defaultdict(list)
        for o in history:
            self.add(o)

    def add(self, o: Observation) -> None:
        for key in ((o.stage_id, o.action, o.mechanism), (o.stage_id, o.action), (o.action,),
                    (None, o.action, o.mechanism)):
            rows = self.rows[key]
            rows.append(o)
            if len(rows) > RECENT and len(key) > 1:
                del rows[0]

    def __call__(self, stage_id: str, action: str, state_bytes: float, mechanism: str | None = None) -> float:
        return self.estimate(stage_id, action, state_bytes, mechanism)

    def samples(self, stage_id: str, action: str, mechanism: str | None = None) -> int:
        key = (stage_id, action) if mechanism is None else (stage_id, action, mechanism)
        return len(self.rows.get(key, ()))

    def source(self, stage_id: str, action: str, mechanism: str | None = None) -> str:
        """Which level `estimate` uses: stage+mechanism | all stages+mechanism | stage | stage restarts
        | all stages | prior, the last four "… × share" for a mechanism in SHARE without rows of its own."""
        name, _ = self._level(stage_id, action, mechanism)
        return f"{name} × share" if self._scaled(name, mechanism) else name

    def estimate(self, stage_id: str, action: str, state_bytes: float, mechanism: str | None = None) -> float:
        name, obs = self._level(stage_id, action, mechanism)
        share = SHARE[mechanism or ""] if self._scaled(name, mechanism) else 1.0
        if obs:
            return share * max(0.0, _fit(obs, state_bytes / 1e6))
        return share * (PRIOR_MS.get(action, 10_000.0) + PRIOR_MS_PER_MB * state_bytes / 1e6)

    @staticmethod
    def _scaled(level: str, mechanism: str | None) -> bool:
        return mechanism in SHARE and not level.endswith("+mechanism")

    def _level(self, stage_id: str, action: str, mechanism: str | None) -> tuple[str, list[Observation]]:
        levels = []
        if mechanism is not None:
            levels.append(("stage+mechanism", self.rows.get((stage_id, action, mechanism), [])))
        if mechanism in SHARE:
            levels.append(("all stages+mechanism", self.rows.get((None, action, mechanism), [])))
        levels.append(("stage", self.rows.get((stage_id, action), [])))
        if mechanism in (None, "pause_resume") and action != RESTART:
            levels.append(("stage restarts", self.rows.get((stage_id, RESTART), [])))
        for name, obs in levels:
            if len(obs) >= (self.min_rows if name.endswith("+mechanism") else 1):
                return name, obs
        obs = self.rows.get((action,), [])
        return ("all stages", obs) if obs else ("prior", [])


def _fit(obs: list[Observation], x: float) -> float:
    xs = [o.state_bytes / 1e6 for o in obs]
    ys = [o.cost_ms for o in obs]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((a - mx) ** 2 for a in xs)
    if len(obs) < 2 or sxx == 0:
        return my
    slope = sum((a - mx) * (b - my) for a, b in zip(xs, ys, strict=True)) / sxx
    return my + max(0.0, slope) * (x - mx)  # cost never shrinks with more state
