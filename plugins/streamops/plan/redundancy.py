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

Proactive redundancy (issue 29 item 4; `Outlook`, optional). The feedback above is reactive: it
sees a fault only once the tail has grown, so the first fault of a burst is never masked. Given
an `Outlook` (plain data: the clock, the faults the stage recorded, their stops and the input-rate
forecast), `step` also
- asks for one full extra replica (r ≥ 1, within r_max) when the expected violated seconds per
  second of run without it, λ̂ · v, reach `add_violation_rate`: λ̂ = faults in the trailing
  `fault_window_s` / `fault_window_s`, v = the violated seconds of one unmasked fault
  (`violated_s_per_fault`, from the mean stop and the forecast utilization);
- gives that replica back (r → ⌈r⌉ − 1, not below r_min) once λ̂ · v falls below
  `give_back_violation_rate`, with the tail within the bound; between the two rates it keeps what
  it asked for (hysteresis);
- after any step that adds a whole replica (⌈r⌉ grows), holds: no decrease until the new
  replica's start-up (`Outlook.startup_s`) plus `hold_periods` periods have passed, and the
  periods in the hold are not remembered as Δl (they measure the start-up, not the new level),
  so the first comparison after it is against the period before the add. Without it a fault
  during the start-up makes the next period look worse and "|Δl| grew: reverse" gives the
  replica back before it ever served.
Without an Outlook (`outlook=None`) the step is Algorithm 2 alone, as before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from streamops.plan.options import by_key, option

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
# The catch-up after a stop lasts stop/(1 − ρ): near ρ = 1 it never ends. Past this utilization
# the estimate stays at 20× the stop (a stage that busy violates its bound with or without faults).
UTILIZATION_CAP = 0.95


@dataclass(frozen=True)
class RedundancyOptions:
    """The redundancy manager's knobs. r, δ_min, r_min and r_max are fractions of one full
    extra copy (1.0 = 100 %); α is in percentage points per 1× of |Δl|/bound."""

    delta_min: float = option(0.10, "δ_min [002]: the smallest step of r that the feedback can see (10 %)")
    alpha_increase: float = option(5.0, "α_i [002]: percentage points of r per 1× of |Δl|/bound, increasing")
    alpha_decrease: float = option(5.0, "α_d [002]: the same, decreasing")
    perf_margin: float = option(0.10, "hold while the bound is met with less slack than this share of it (ours)")
    r_min: float = option(0.0, "the floor of r ([002] §4.2.1 suggests one when faults are infrequent)")
    r_max: float = option(1.0, "the ceiling of r: one full extra replica (the thesis reached 1.97)")
    # --- proactive redundancy (ours, issue 29 item 4): read only when step() gets an Outlook ---
    # Two default periods: a burst of faults every ~20-30 s never shows an empty window (P ≈ e^-4
    # at 30 s), and the replica is given back about two minutes after the last fault.
    fault_window_s: float = option(120.0, "proactive: the trailing window of the fault-rate estimate λ̂, seconds")
    # A fault of ~15 violated seconds in two minutes (0.12) is enough; a fault an hour (0.004) is not.
    add_violation_rate: float = option(0.05, (
        "proactive: ask for a whole extra replica when λ̂·v (violated seconds per second without it) reaches "
        "this, the price of a replica-second; 0: off"))
    give_back_violation_rate: float = option(0.01, (
        "proactive: give that replica back below this (hysteresis, ≤ add_violation_rate)"))
    hold_periods: float = option(1.0, (
        "after a step that adds a whole replica, no decrease for its start-up plus this many periods; 0: off"))

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
        if not self.fault_window_s > 0:
            raise ValueError(f"fault_window_s must be > 0, got {self.fault_window_s}")
        for name in ("add_violation_rate", "give_back_violation_rate", "hold_periods"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.add_violation_rate > 0 and not self.give_back_violation_rate <= self.add_violation_rate:
            raise ValueError(f"give_back_violation_rate must be <= add_violation_rate ({self.add_violation_rate}), "
                             f"got {self.give_back_violation_rate}")

    @classmethod
    def from_params(cls, params: dict[str, Any] | None) -> RedundancyOptions:
        """Overrides from a stage's `policy.params` (or an app's `control` block): unknown keys
        and values that are not numbers are refused, naming the field."""
        params = by_key(cls, params)
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
    hold_until_s: float | None = None  # (Outlook clock) no decrease before this: a replica added is starting
    proactive: bool = False  # the Outlook asked for the extra replica and has not given it back

    @property
    def last_abs_delta_ms(self) -> float | None:
        return None if self.last_delta_ms is None else abs(self.last_delta_ms)


@dataclass(frozen=True)
class Outlook:
    """What the proactive rule and the start-up hold read: plain data, the same from the
    simulator (sim/ha.py) and from production.

    fault_times_s: when the faults were observed (any order; older ones are ignored) that would
    stop the stage if it ran one replica: in the simulator every fault of the stage (its schedule
    is per stage, whatever the replica count), in production the `failures` rows of its primary.
    stop_s: the mean stop of one of those faults (a kill's restart, a pause's length), seconds.
    utilization: the forecast input rate over the next period / one replica's capacity (None:
    unknown, read as 0: the stop alone)."""

    now_s: float
    period_s: float
    startup_s: float = 0.0  # a new replica's start-up (replays from the source; the restart time)
    fault_times_s: Sequence[float] = ()
    stop_s: float = 0.0
    utilization: float | None = None

    def __post_init__(self) -> None:
        for name in ("now_s", "period_s", "startup_s", "stop_s"):
            v = getattr(self, name)
            if not math.isfinite(v) or (name != "now_s" and v < 0):
                raise ValueError(f"Outlook.{name} must be a finite number{'' if name == 'now_s' else ' >= 0'}, "
                                 f"got {v!r}")


def fault_rate(fault_times_s: Sequence[float], now_s: float, window_s: float) -> float:
    """λ̂: faults in the trailing window (now − window, now], per second."""
    return sum(1 for x in fault_times_s if now_s - window_s < x <= now_s) / window_s


def violated_s_per_fault(stop_s: float, bound_ms: float, utilization: float | None) -> float:
    """The violated 1 s windows one unmasked fault costs: max(stop, (stop − bound)/(1 − ρ)).

    While the replica is stopped nothing is written (stalled windows count as violated); once
    back, a record's delay starts at the stop's length and falls by (1 − ρ) seconds per second
    as the backlog drains, so it stays above the bound for (stop − bound)/(1 − ρ). ρ is the
    forecast utilization, capped at UTILIZATION_CAP."""
    rho = min(UTILIZATION_CAP, max(0.0, utilization or 0.0))
    return max(stop_s, (stop_s - bound_ms / 1000.0) / (1.0 - rho))


def violation_rate(outlook: Outlook, bound_ms: float, opts: RedundancyOptions) -> float:
    """λ̂ · v: the expected violated seconds per second of run with one replica."""
    lam = fault_rate(outlook.fault_times_s, outlook.now_s, opts.fault_window_s)
    return lam * violated_s_per_fault(outlook.stop_s, bound_ms, outlook.utilization) if lam > 0 else 0.0


def _whole(r: float) -> int:
    """Whole extra replicas that r asks for: ⌈r⌉ (float noise above a whole number ignored)."""
    return max(0, math.ceil(r - _EPS))


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
         opts: RedundancyOptions, outlook: Outlook | None = None) -> tuple[RedundancyState, RedundancyDecision]:
    """One period of Algorithm 2. `tail_latency_ms` is the feedback metric (the thesis used the
    p90 of 1-second windows); None (no batch in the window) holds and remembers nothing.

    With an `outlook`, the proactive rule and the start-up hold (module docstring) act on the
    feedback's decision; without one the step is the feedback alone."""
    if not (math.isfinite(bound_ms) and bound_ms > 0):
        raise ValueError(f"bound_ms must be a finite number > 0, got {bound_ms!r}")
    s1, d = _feedback(state, tail_latency_ms, bound_ms, opts)
    if outlook is None:
        return s1, d
    return _proactive(state, s1, d, bound_ms, opts, outlook)


def _proactive(state: RedundancyState, s1: RedundancyState, d: RedundancyDecision, bound_ms: float,
               opts: RedundancyOptions, o: Outlook) -> tuple[RedundancyState, RedundancyDecision]:
    """The feedback's step (s1, d) from `state`, then the Outlook's rules: the fault-rate
    estimate sets a floor of one whole replica or gives it back, and the hold blocks a decrease."""
    r0 = _clamp(state.r, opts)
    hold = opts.hold_periods > 0 and state.hold_until_s is not None and o.now_s < state.hold_until_s
    r, direction, last, proactive, notes = s1.r, s1.direction, s1.last_delta_ms, state.proactive, []
    if opts.add_violation_rate > 0:
        lam = fault_rate(o.fault_times_s, o.now_s, opts.fault_window_s)
        v = violated_s_per_fault(o.stop_s, bound_ms, o.utilization)
        rate = lam * v if lam > 0 else 0.0
        est = f"λ̂·v {rate:.3g} ({lam:.3g} faults/s × {v:.3g} s)"
        floor = min(opts.r_max, max(opts.r_min, 1.0))
        if rate >= opts.add_violation_rate:
            proactive = True
            if r < floor:
                r, direction = floor, 1
                notes.append(f"proactive: {est} ≥ {opts.add_violation_rate:g}: one full extra replica, r → {r:.3g}")
        elif proactive and rate < opts.give_back_violation_rate and not hold:
            proactive = False
            back = max(opts.r_min, float(_whole(r0) - 1))
            if d.delta_ms is not None and d.delta_ms <= 0 and r > back:
                r, direction = back, -1
                notes.append(f"proactive: {est} < {opts.give_back_violation_rate:g}, the faults stopped: "
                             f"give the replica back, r → {r:.3g}")
        elif proactive and r < floor:  # between the two rates, or in the hold: keep what was asked for
            r, direction = floor, 1
            notes.append(f"proactive: {est} not below {opts.give_back_violation_rate:g} yet: keep r {r:.3g}")
    if hold:
        if r < r0:
            r = r0
            notes.append(f"hold: the replica added is starting up (hold until {state.hold_until_s:g} s): "
                         f"no decrease, r {r:.3g}")
        if r == r0:  # nothing moved: this period measured the start-up, not the new level; forget it
            direction, last = state.direction, state.last_delta_ms
    hold_until = state.hold_until_s if hold else None
    if _whole(r) > _whole(r0) and opts.hold_periods > 0:
        hold_until = o.now_s + o.startup_s + opts.hold_periods * o.period_s
    action = INCREASE if r > r0 else DECREASE if r < r0 else HOLD
    reason = "; ".join([d.reason, *notes])
    return (RedundancyState(r, direction, last, hold_until, proactive),
            replace(d, action=action, r=r, reason=reason))


def _feedback(state: RedundancyState, tail_latency_ms: float | None, bound_ms: float,
              opts: RedundancyOptions) -> tuple[RedundancyState, RedundancyDecision]:
    """Algorithm 2's step alone (see `step`)."""
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
