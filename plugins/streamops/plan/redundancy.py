"""The redundancy manager: Dynamo's feedback hill-climb of a redundancy level r against a
tail-latency bound (Tran, USC 2020 thesis [002], §4.2, Algorithm 2 "DynamoRedundancySearch";
POLICIES.md §6 "Redundancy manager").

Pure: (state, tail latency, bound, options) → (new state, decision). Every period:
    Δl = latency − bound
    −perf_margin·bound ≤ Δl ≤ 0   hold: the bound is met with less slack than the margin
    Δl < −perf_margin·bound         decrease: over-performing, give redundancy back
    Δl > 0                          first period above: increase; then keep the direction while
                                    |Δl| shrinks and reverse it when |Δl| grows
    step = max(δ_min, |Δl|/bound · α/100)   (α_increase or α_decrease), r clamped to [r_min, r_max]

Units. r is extra computation as a fraction of one full copy of the stage: 0 = none, 0.1 = 10 %,
1.0 = one full extra replica. The thesis counts r in percent (δ_min = 10 %, a static level of
160 %, a jump to 197 %), so its α = 5 is in percentage points per 1× of |Δl|/bound: hence the /100.
Read literally on a fraction, α = 5 would add a whole replica for a 20 % excess and r would bang
between its limits.

What r drives (`replicas_for`, `speculation_conf`): the replica count of an HA stage (active
replication, POLICIES.md §6) and Spark's speculative execution of straggler tasks
(`spark.speculation*`), Spark's built-in computation redundancy. The speculation settings are
SparkContext settings, read when the driver starts: they apply at the stage's next (re)start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

INCREASE, DECREASE, HOLD = "increase", "decrease", "hold"

# α is in percentage points of r (the thesis's unit); r is a fraction. See the module docstring.
ALPHA_UNIT = 0.01
# Float sums of 0.1-steps land a hair above whole numbers (0.1 × 10 = 1.0000000000000002).
_EPS = 1e-9

# Spark 4's own defaults (spark-core 4.3.0, internal/config/package.scala): speculation at the
# smallest r starts from them.
SPARK_SPECULATION_QUANTILE = 0.9
SPARK_SPECULATION_MULTIPLIER = 3.0
# Where r = 1 (one full extra copy) puts them: speculate once half the tasks are done, on a task
# 1.5× slower than the median (Spark 3's default multiplier). Below 1× the median would
# speculate ordinary tasks.
EAGER_SPECULATION_QUANTILE = 0.5
EAGER_SPECULATION_MULTIPLIER = 1.5


@dataclass(frozen=True)
class RedundancyOptions:
    """The redundancy manager's knobs. r, δ_min, r_min and r_max are fractions of one full
    extra copy (1.0 = 100 %); α is in percentage points per 1× of |Δl|/bound."""

    delta_min: float = 0.10  # [002] δ_min = 10 %: the smallest step that the feedback can see
    alpha_increase: float = 5.0  # [002] α_i
    alpha_decrease: float = 5.0  # [002] α_d
    perf_margin: float = 0.10  # ours: [002] has perfMargin but gives no value
    r_min: float = 0.0  # [002] suggests a floor when faults are infrequent (§4.2.1)
    r_max: float = 1.0  # ours: one full extra replica (the thesis reached 1.97)

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                raise ValueError(f"{f.name} must be a finite number, got {v!r}")
        # `not (a < b)` rather than `a >= b` throughout: a NaN fails every check.
        if not self.delta_min > 0:
            raise ValueError(f"delta_min must be > 0 (a zero step never moves r), got {self.delta_min}")
        for name in ("alpha_increase", "alpha_decrease"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.perf_margin < 1:
            raise ValueError(f"perf_margin must be in [0, 1) (a share of the bound), got {self.perf_margin}")
        if not self.r_min >= 0:
            raise ValueError(f"r_min must be >= 0, got {self.r_min}")
        if not self.r_max >= self.r_min:
            raise ValueError(f"r_max must be >= r_min ({self.r_min}), got {self.r_max}")

    @classmethod
    def from_params(cls, params: dict[str, Any] | None) -> "RedundancyOptions":
        """Overrides from a stage's `policy.params` (or an app's `control` block): unknown keys
        and values that are not numbers are refused, naming the field."""
        params = params or {}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} option(s) {unknown}; valid: {sorted(known)}")
        values = {}
        for k, v in params.items():
            if isinstance(v, bool):  # float(True) is 1.0: almost certainly a mistake here
                raise ValueError(f"{k} must be a number, got {v!r}")
            try:
                values[k] = float(v)
            except (TypeError, ValueError):
                raise ValueError(f"{k} must be a number, got {v!r}") from None
        return cls(**values)


@dataclass(frozen=True)
class RedundancyState:
    """What the manager remembers between periods."""

    r: float = 0.0
    direction: int = 0  # +1 increasing, −1 decreasing, 0 held (or not started)
    last_delta_ms: float | None = None  # signed Δl of the last observation; None before the first

    @property
    def last_abs_delta_ms(self) -> float | None:
        return None if self.last_delta_ms is None else abs(self.last_delta_ms)


def initial_state(opts: RedundancyOptions) -> RedundancyState:
    """A stage's first state: at its floor, no direction yet."""
    return RedundancyState(r=opts.r_min)


@dataclass(frozen=True)
class RedundancyDecision:
    action: str  # increase | decrease | hold: what happened to r (a blocked move is a hold)
    r_before: float
    r: float
    step: float  # the step taken before clamping; 0 when holding by rule
    delta_ms: float | None
    reason: str

    @property
    def changed(self) -> bool:
        return self.r != self.r_before


def step_size(delta_ms: float, bound_ms: float, alpha: float, delta_min: float) -> float:
    """max(δ_min, |Δl|/bound · α), α in percentage points of r."""
    return max(delta_min, abs(delta_ms) / bound_ms * alpha * ALPHA_UNIT)


def _clamp(r: float, opts: RedundancyOptions) -> float:
    return min(opts.r_max, max(opts.r_min, r))


def step(state: RedundancyState, tail_latency_ms: float | None, bound_ms: float,
         opts: RedundancyOptions) -> tuple[RedundancyState, RedundancyDecision]:
    """One period of Algorithm 2. `tail_latency_ms` is the feedback metric (the thesis used the
    p90 of 1-second windows); None (no batch in the window) holds and remembers nothing."""
    if not (math.isfinite(bound_ms) and bound_ms > 0):
        raise ValueError(f"bound_ms must be a finite number > 0, got {bound_ms!r}")
    r0 = _clamp(state.r, opts)  # options may have changed since the state was saved
    note = f" (r {state.r:.3g} clamped into [{opts.r_min:g}, {opts.r_max:g}])" if r0 != state.r else ""
    if tail_latency_ms is None or not math.isfinite(tail_latency_ms):
        return (RedundancyState(r0, state.direction, state.last_delta_ms),
                RedundancyDecision(HOLD, state.r, r0, 0.0, None, f"no tail latency observed: hold r {r0:.3g}{note}"))

    dl = tail_latency_ms - bound_ms
    margin = opts.perf_margin * bound_ms
    lat = f"tail latency {tail_latency_ms:.1f} ms vs bound {bound_ms:.1f} ms (Δl {dl:+.1f} ms)"

    if -margin <= dl <= 0:
        # The thesis's safety margin is one-sided: it stops reductions while the latency is
        # under the bound but closer than the margin; any excess above the bound is acted on.
        return (RedundancyState(r0, 0, dl),
                RedundancyDecision(HOLD, state.r, r0, 0.0, dl,
                                   f"{lat}: within the margin {margin:.1f} ms below the bound, hold r {r0:.3g}{note}"))

    if dl < 0:
        direction, why = -1, f"more than the margin {margin:.1f} ms below the bound: over-performing"
    else:
        prev = state.last_delta_ms
        if prev is None or prev <= 0 or state.direction == 0:
            direction, why = 1, "first period above the bound"
        elif abs(dl) > abs(prev):
            direction, why = -state.direction, f"|Δl| grew from {abs(prev):.1f} ms: reverse"
        else:  # shrank, or unchanged (the thesis only adapts when Δl changes)
            how = "shrank" if abs(dl) < abs(prev) else "unchanged"
            direction, why = state.direction, f"|Δl| {how} from {abs(prev):.1f} ms: keep going"
        if direction < 0 and r0 <= opts.r_min:
            # Pushing into the floor would leave r there for as long as Δl stays put: a
            # hill-climb that cannot test one side tests the other.
            direction, why = 1, why + f"; r already at r_min {opts.r_min:g}, so increase instead"

    alpha = opts.alpha_increase if direction > 0 else opts.alpha_decrease
    size = step_size(dl, bound_ms, alpha, opts.delta_min)
    r1 = _clamp(r0 + direction * size, opts)
    verb = "increase" if direction > 0 else "decrease"
    sizing = (f"step {size:.3g} = max(δ_min {opts.delta_min:g}, |Δl|/bound {abs(dl) / bound_ms:.3g} × "
              f"α {alpha:g}%)")
    if r1 == r0:
        limit = "r_max" if direction > 0 else "r_min"
        reason = f"{lat}: {why}; would {verb} but r is at {limit} {r1:.3g}: hold{note}"
        action = HOLD
    else:
        clamp = f", clamped to {'r_max' if direction > 0 else 'r_min'}" if r1 != r0 + direction * size else ""
        reason = f"{lat}: {why}; {verb} r {r0:.3g} → {r1:.3g} ({sizing}{clamp}){note}"
        action = INCREASE if direction > 0 else DECREASE
    return RedundancyState(r1, direction, dl), RedundancyDecision(action, state.r, r1, size, dl, reason)


def replicas_for(r: float, max_replicas: int) -> int:
    """Replicas of an HA stage for redundancy r: 1 + ⌈r⌉, within [1, max_replicas].

    A replica is a whole driver, so a fractional r is rounded up: the stage never runs with less
    redundancy than asked (0 → 1 replica, 0.1 … 1.0 → 2, 1.1 … 2.0 → 3). The fraction between
    replicas is served by speculation (`speculation_conf`). A stage that must always have a
    standby sets r_min = 1.
    """
    if isinstance(max_replicas, bool) or not isinstance(max_replicas, int) or max_replicas < 1:
        raise ValueError(f"max_replicas must be an int >= 1, got {max_replicas!r}")
    if not (math.isfinite(r) and r >= 0):
        raise ValueError(f"r must be a finite number >= 0, got {r!r}")
    return max(1, min(max_replicas, 1 + math.ceil(r - _EPS)))


def speculation_conf(r: float) -> dict[str, str]:
    """Spark speculative-execution settings for redundancy r (strings, as the driver's conf).

    r = 0 turns speculation off (Spark's defaults for the other two keys). Above 0 it is on,
    and more redundancy speculates earlier: quantile (the share of a stage's tasks that must be
    done before Spark looks for stragglers) and multiplier (how many times the median task
    duration makes a straggler) fall linearly from Spark's defaults (0.9, 3.0) as r → 0 to
    (0.5, 1.5) at r = 1, and stay there above. Spark ignores speculation in local[n] mode: it
    takes effect on a standalone pool.
    """
    if not (math.isfinite(r) and r >= 0):
        raise ValueError(f"r must be a finite number >= 0, got {r!r}")
    t = min(1.0, r)
    quantile = SPARK_SPECULATION_QUANTILE - (SPARK_SPECULATION_QUANTILE - EAGER_SPECULATION_QUANTILE) * t
    multiplier = SPARK_SPECULATION_MULTIPLIER - (SPARK_SPECULATION_MULTIPLIER - EAGER_SPECULATION_MULTIPLIER) * t
    return {
        "spark.speculation": "true" if r > 0 else "false",
        "spark.speculation.quantile": f"{quantile:.4f}",
        "spark.speculation.multiplier": f"{multiplier:.4f}",
    }
