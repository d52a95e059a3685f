"""The redundancy manager (POLICIES.md §6, Dynamo [002] Algorithm 2): plan.redundancy.

Table tests for each rule of the hill-climb, options validation, the replica and speculation
mappings, synthetic latency curves it must settle on, then hypothesis properties. Pure: no
Spark, no database.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from streamops.plan.redundancy import (
    DECREASE,
    HOLD,
    INCREASE,
    Outlook,
    RedundancyOptions,
    RedundancyState,
    initial_state,
    replicas_for,
    speculation_conf,
    step,
    step_size,
    violated_s_per_fault,
    violation_rate,
)

OPT = RedundancyOptions()
BOUND = 100.0
PROPS = settings(max_examples=200, deadline=None)


def run(curve, bound: float, periods: int = 60, opts: RedundancyOptions = OPT, noise: float = 0.0, seed: int = 0):
    """Close the loop on a latency curve r → ms; returns the r after each period and the latencies."""
    rng = random.Random(seed)
    s, rs, lats = initial_state(opts), [], []
    for _ in range(periods):
        lat = curve(s.r) * (1.0 + rng.uniform(-noise, noise))
        s, _ = step(s, lat, bound, opts)
        rs.append(s.r)
        lats.append(lat)
    return rs, lats


# --------------------------------------------------------------------------------------------
# the rules


def test_defaults_are_the_papers():
    assert (OPT.delta_min, OPT.alpha_increase, OPT.alpha_decrease) == (0.10, 5.0, 5.0)
    assert OPT.r_min == 0.0 and OPT.r_max >= OPT.r_min


@pytest.mark.parametrize("latency", [90.0, 95.0, 99.9, 100.0])
def test_hold_inside_the_margin(latency):
    s0 = RedundancyState(r=0.4, direction=1, last_delta_ms=30.0)
    s1, d = step(s0, latency, BOUND, OPT)
    assert d.action == HOLD and not d.changed
    assert s1.r == 0.4 and s1.direction == 0 and s1.last_delta_ms == latency - BOUND
    assert "margin" in d.reason


def test_margin_is_one_sided_an_excess_is_acted_on():
    s1, d = step(RedundancyState(r=0.4), 105.0, BOUND, OPT)
    assert d.action == INCREASE and s1.r > 0.4


def test_increase_on_the_first_period_above_the_bound():
    for prev in (None, -30.0, -5.0):  # never seen, below the margin, inside it
        s1, d = step(RedundancyState(r=0.2, direction=-1, last_delta_ms=prev), 150.0, BOUND, OPT)
        assert d.action == INCREASE and s1.direction == 1
        assert s1.r == pytest.approx(0.3)
        assert "first period above" in d.reason


def test_decrease_when_more_than_the_margin_below():
    s1, d = step(RedundancyState(r=0.5, direction=1, last_delta_ms=20.0), 50.0, BOUND, OPT)
    assert d.action == DECREASE and s1.direction == -1
    assert s1.r == pytest.approx(0.4)


def test_step_size_both_branches_of_max():
    # |Δl|/bound · α/100 below δ_min: the step is δ_min
    assert step_size(50.0, BOUND, 5.0, 0.10) == pytest.approx(0.10)
    # above δ_min: the proportional term (|Δl|/bound = 4 → 4 · 5 % = 0.2)
    assert step_size(400.0, BOUND, 5.0, 0.10) == pytest.approx(0.20)
    assert step_size(-400.0, BOUND, 5.0, 0.10) == pytest.approx(0.20)  # |Δl|
    # through step(): α_increase when increasing, α_decrease when decreasing
    opts = RedundancyOptions(alpha_increase=20.0, alpha_decrease=40.0, r_max=2.0)
    s1, d = step(RedundancyState(r=0.0), 200.0, BOUND, opts)  # Δl/bound 1 → 1 · 20 % = 0.2
    assert d.step == pytest.approx(0.2) and s1.r == pytest.approx(0.2)
    s2, d = step(RedundancyState(r=1.0), 20.0, BOUND, opts)  # |Δl|/bound 0.8 → 0.8 · 40 % = 0.32
    assert d.step == pytest.approx(0.32) and s2.r == pytest.approx(0.68)
    s3, d = step(RedundancyState(r=1.0), 85.0, BOUND, opts)  # 0.15 · 40 % = 0.06 < δ_min
    assert d.step == pytest.approx(0.10) and s3.r == pytest.approx(0.9)


def test_keep_the_direction_while_the_error_shrinks():
    s1, d = step(RedundancyState(r=0.3, direction=1, last_delta_ms=50.0), 130.0, BOUND, OPT)
    assert d.action == INCREASE and s1.direction == 1 and "shrank" in d.reason
    s2, d = step(RedundancyState(r=0.3, direction=-1, last_delta_ms=50.0), 130.0, BOUND, OPT)
    assert d.action == DECREASE and s2.direction == -1


def test_unchanged_error_keeps_the_direction():
    s1, d = step(RedundancyState(r=0.3, direction=-1, last_delta_ms=30.0), 130.0, BOUND, OPT)
    assert d.action == DECREASE and s1.direction == -1 and "unchanged" in d.reason


def test_reverse_when_the_error_grows():
    s1, d = step(RedundancyState(r=0.3, direction=1, last_delta_ms=30.0), 150.0, BOUND, OPT)
    assert d.action == DECREASE and s1.direction == -1 and s1.r == pytest.approx(0.2)
    assert "reverse" in d.reason
    s2, d = step(s1, 170.0, BOUND, OPT)  # worse again: back up
    assert d.action == INCREASE and s2.direction == 1 and s2.r == pytest.approx(0.3)


def test_a_reversal_into_the_floor_increases_instead():
    s1, d = step(RedundancyState(r=0.0, direction=1, last_delta_ms=30.0), 150.0, BOUND, OPT)
    assert d.action == INCREASE and s1.direction == 1 and "r_min" in d.reason


def test_clamped_to_r_max_then_held_there():
    s1, d = step(RedundancyState(r=0.95), 1000.0, BOUND, OPT)  # step 0.45
    assert d.action == INCREASE and s1.r == OPT.r_max and "clamped to r_max" in d.reason
    s2, d = step(s1, 1000.0, BOUND, OPT)  # still above, |Δl| unchanged: would increase
    assert d.action == HOLD and s2.r == OPT.r_max and "r_max" in d.reason


def test_clamped_to_r_min_then_held_there():
    opts = RedundancyOptions(r_min=0.2)
    assert initial_state(opts).r == 0.2
    s1, d = step(RedundancyState(r=0.25), 10.0, BOUND, opts)
    assert d.action == DECREASE and s1.r == 0.2 and "clamped to r_min" in d.reason
    s2, d = step(s1, 10.0, BOUND, opts)
    assert d.action == HOLD and s2.r == 0.2


def test_a_saved_state_outside_new_options_is_clamped():
    s1, d = step(RedundancyState(r=3.0), 95.0, BOUND, OPT)
    assert d.action == HOLD and s1.r == OPT.r_max and d.r_before == 3.0 and "clamped" in d.reason


def test_no_latency_holds_and_forgets_nothing():
    s0 = RedundancyState(r=0.3, direction=1, last_delta_ms=40.0)
    s1, d = step(s0, None, BOUND, OPT)
    assert d.action == HOLD and s1 == s0 and d.delta_ms is None


@pytest.mark.parametrize("bound", [0.0, -1.0, math.nan, math.inf])
def test_the_bound_must_be_positive(bound):
    with pytest.raises(ValueError, match="bound_ms"):
        step(RedundancyState(), 100.0, bound, OPT)


# --------------------------------------------------------------------------------------------
# options


@pytest.mark.parametrize("params,field", [
    ({"delta_min": 0}, "delta_min"),
    ({"delta_min": -0.1}, "delta_min"),
    ({"alpha_increase": -1}, "alpha_increase"),
    ({"alpha_decrease": -1}, "alpha_decrease"),
    ({"perf_margin": 1.0}, "perf_margin"),
    ({"perf_margin": -0.1}, "perf_margin"),
    ({"r_min": -0.5}, "r_min"),
    ({"r_min": 0.5, "r_max": 0.4}, "r_max"),
    ({"r_max": "nan"}, "r_max"),
    ({"r_max": "inf"}, "r_max"),
    ({"alpha_increase": "fast"}, "alpha_increase"),
    ({"alpha_increase": None}, "alpha_increase"),
    ({"perf_margin": True}, "perf_margin"),
    ({"delta": 0.1}, "delta"),  # unknown
    ({"fault_window_s": 0}, "fault_window_s"),
    ({"add_violation_rate": -0.1}, "add_violation_rate"),
    ({"give_back_violation_rate": -0.1}, "give_back_violation_rate"),
    ({"add_violation_rate": 0.05, "give_back_violation_rate": 0.1}, "give_back_violation_rate"),
    ({"hold_periods": -1}, "hold_periods"),
])
def test_options_validation_names_the_field(params, field):
    with pytest.raises(ValueError, match=field):
        RedundancyOptions.from_params(params)


def test_options_from_params():
    assert RedundancyOptions.from_params(None) == OPT
    assert RedundancyOptions.from_params({}) == OPT
    o = RedundancyOptions.from_params({"r_max": "2", "perf_margin": 0.05, "alpha_decrease": 3})
    assert (o.r_max, o.perf_margin, o.alpha_decrease) == (2.0, 0.05, 3.0)
    with pytest.raises(ValueError, match="valid"):
        RedundancyOptions.from_params({"speed": 1})


# --------------------------------------------------------------------------------------------
# what r drives


@pytest.mark.parametrize("r,max_replicas,expected", [
    (0.0, 4, 1), (0.1, 4, 2), (0.5, 4, 2), (1.0, 4, 2), (1.0 + 1e-12, 4, 2),  # float noise above 1
    (1.1, 4, 3), (2.0, 4, 3), (5.0, 3, 3), (0.7, 1, 1),
])
def test_replicas_for(r, max_replicas, expected):
    assert replicas_for(r, max_replicas) == expected


@pytest.mark.parametrize("r,max_replicas", [(-0.1, 2), (math.nan, 2), (0.5, 0), (0.5, 2.0)])
def test_replicas_for_refuses(r, max_replicas):
    with pytest.raises(ValueError):
        replicas_for(r, max_replicas)


def test_speculation_conf_keys_and_off_at_zero():
    off = speculation_conf(0.0)
    assert off == {"spark.speculation": "false", "spark.speculation.quantile": "0.9000",
                   "spark.speculation.multiplier": "3.0000"}  # Spark 4's defaults
    on = speculation_conf(0.1)
    assert on["spark.speculation"] == "true" and on.keys() == off.keys()
    full = speculation_conf(1.0)
    assert float(full["spark.speculation.quantile"]) == 0.5
    assert float(full["spark.speculation.multiplier"]) == 1.5
    assert speculation_conf(3.0) == full


@PROPS
@given(a=st.floats(0.0, 5.0), b=st.floats(0.0, 5.0))
def test_more_redundancy_speculates_earlier(a, b):
    lo, hi = sorted((a, b))
    c_lo, c_hi = speculation_conf(lo), speculation_conf(hi)
    for key in ("spark.speculation.quantile", "spark.speculation.multiplier"):
        assert float(c_hi[key]) <= float(c_lo[key])
    q, m = float(c_hi["spark.speculation.quantile"]), float(c_hi["spark.speculation.multiplier"])
    assert 0.0 < q < 1.0 and m >= 1.0
    assert (c_hi["spark.speculation"] == "true") == (hi > 0)


# --------------------------------------------------------------------------------------------
# closed loop on synthetic latency curves: redundancy helps, then its load hurts (the thesis's
# concave-upward curve, Fig. 4.8)


def test_settles_on_the_least_redundancy_that_meets_the_bound():
    rs, lats = run(lambda r: 150.0 / (1 + 3 * r) + 20.0 * r, BOUND)
    tail = rs[10:]
    assert max(tail) == min(tail)  # stopped moving
    assert BOUND * (1 - OPT.perf_margin) <= lats[-1] <= BOUND
    # one step less would miss the bound: it is the least level that meets it
    assert 150.0 / (1 + 3 * (tail[-1] - OPT.delta_min)) + 20.0 * (tail[-1] - OPT.delta_min) > BOUND


def test_best_effort_oscillates_tightly_around_the_minimum_latency():
    # Wholly above the bound (case 1): it searches for the lowest latency, r* ≈ 0.58.
    curve = lambda r: 150.0 / (1 + 3 * r) + 60.0 * r  # noqa: E731
    rs, _ = run(curve, 60.0)
    tail = rs[20:]
    assert max(tail) - min(tail) <= 2 * OPT.delta_min + 1e-9
    r_star = (math.sqrt(7.5) - 1) / 3
    assert abs(sum(tail) / len(tail) - r_star) <= 0.15


def test_noisy_latency_stays_near_the_efficient_level():
    rs, lats = run(lambda r: 150.0 / (1 + 3 * r) + 20.0 * r, BOUND, periods=200, noise=0.03, seed=7)
    tail, tail_lat = rs[20:], lats[20:]
    assert max(tail) - min(tail) <= OPT.delta_min + 1e-9
    assert sum(lat > BOUND for lat in tail_lat) / len(tail_lat) < 0.25


def test_releases_redundancy_when_the_fault_passes():
    fault = lambda r: 300.0 / (1 + 3 * r) + 20.0 * r  # noqa: E731
    calm = lambda r: 60.0 + 20.0 * r  # noqa: E731
    s = initial_state(OPT)
    for _ in range(30):
        s, _ = step(s, fault(s.r), BOUND, OPT)
    assert s.r >= 0.5
    for _ in range(30):
        s, _ = step(s, calm(s.r), BOUND, OPT)
    assert s.r == OPT.r_min


# --------------------------------------------------------------------------------------------
# proactive redundancy (issue 29 item 4): the fault-rate estimate and the start-up hold

RMAX = 200.0  # the simulator's R_max (ms): a 5 s stop is 25 bounds
PERIOD, STARTUP = 60.0, 8.3


def outlook(now: float, faults=(), stop: float = 5.0, util: float | None = 0.65) -> Outlook:
    return Outlook(now_s=now, period_s=PERIOD, startup_s=STARTUP, fault_times_s=tuple(faults), stop_s=stop,
                   utilization=util)


def test_violated_seconds_per_fault_grow_with_the_forecast_utilization():
    # stalled for the stop, then above the bound while the backlog drains at (1 − ρ)
    assert violated_s_per_fault(5.0, RMAX, 0.0) == pytest.approx(5.0)
    assert violated_s_per_fault(5.0, RMAX, 0.65) == pytest.approx(4.8 / 0.35)
    assert violated_s_per_fault(5.0, RMAX, 0.8) > violated_s_per_fault(5.0, RMAX, 0.65)
    assert violated_s_per_fault(5.0, RMAX, 3.0) == pytest.approx(4.8 / 0.05)  # capped: finite when overloaded
    assert violated_s_per_fault(5.0, RMAX, None) == pytest.approx(5.0)  # no forecast: the stop alone
    # λ̂: faults in the trailing window only (the one at 0 s is older than 120 s)
    assert violation_rate(outlook(300.0, [0.0, 200.0, 290.0]), RMAX, OPT) == pytest.approx(2 / 120 * 4.8 / 0.35)


def test_proactive_add_from_the_fault_rate_before_the_tail_grows():
    """Two faults in the last two minutes, the tail inside the margin: the feedback alone holds at
    one replica; the estimate (2/120 faults/s × 13.7 s ≈ 0.23 ≥ 0.05) asks for the extra replica."""
    s0, tail = RedundancyState(r=0.0), 190.0  # within the 10 % margin below the bound: the feedback holds
    fb, d = step(s0, tail, RMAX, OPT)
    assert d.action == HOLD and fb.r == 0.0 and replicas_for(fb.r, 2) == 1
    s1, d = step(s0, tail, RMAX, OPT, outlook(600.0, [500.0, 550.0]))
    assert d.action == INCREASE and s1.r == pytest.approx(1.0) and replicas_for(s1.r, 2) == 2
    assert s1.proactive and "proactive" in d.reason
    # the hold starts with the add: the replica's start-up plus one period
    assert s1.hold_until_s == pytest.approx(600.0 + STARTUP + PERIOD)
    # faults too rare to pay for a replica (one an hour: 13.7/3600 ≈ 0.004), or none in the window: no add
    for faults in ([-3000.0], [450.0]):
        s2, d = step(s0, tail, RMAX, OPT, outlook(600.0, faults))
        assert d.action == HOLD and s2.r == 0.0 and not s2.proactive
    # a faster input makes the same faults costlier: at ρ = 0.1 one fault in the window (5 s / 120 s
    # ≈ 0.042) is below the price, at ρ = 0.65 (0.114) above it
    assert step(s0, tail, RMAX, OPT, outlook(600.0, [550.0], util=0.1))[0].r == 0.0
    assert step(s0, tail, RMAX, OPT, outlook(600.0, [550.0], util=0.65))[0].r == pytest.approx(1.0)
    # turned off: the feedback alone
    off = RedundancyOptions(add_violation_rate=0.0)
    assert step(s0, tail, RMAX, off, outlook(600.0, [500.0, 550.0]))[0].r == 0.0


def test_proactive_replica_is_kept_between_the_rates_and_given_back_when_faults_stop():
    s = RedundancyState(r=1.0, direction=1, last_delta_ms=-150.0, proactive=True)
    # over-performing (Δl −150 ms): the feedback alone steps r down by δ_min, and keeps 2 replicas for 10 periods
    fb, d = step(s, 50.0, RMAX, OPT)
    assert d.action == DECREASE and fb.r == pytest.approx(0.9) and replicas_for(fb.r, 2) == 2
    # one 2 s fault left in the window (2/120 ≈ 0.017): below the price (0.05), above the give-back
    # rate (0.01): the replica is kept whole (hysteresis)
    kept, d = step(s, 50.0, RMAX, OPT, outlook(600.0, [590.0], stop=2.0, util=0.0))
    assert kept.r == pytest.approx(1.0) and kept.proactive and d.action == HOLD and "keep" in d.reason
    # no fault in the window: give the whole replica back at once
    back, d = step(s, 50.0, RMAX, OPT, outlook(600.0, [400.0]))
    assert d.action == DECREASE and back.r == 0.0 and replicas_for(back.r, 2) == 1
    assert not back.proactive and "give the replica back" in d.reason
    # ... but not while the tail is above the bound: the feedback decides then
    above, d = step(s, 400.0, RMAX, OPT, outlook(600.0, [400.0]))
    assert above.r >= 1.0 and replicas_for(above.r, 2) == 2 and not above.proactive
    # a replica the feedback asked for (not proactive) is left to the feedback
    fb_only = RedundancyState(r=1.0, direction=1, last_delta_ms=-150.0)
    assert step(fb_only, 50.0, RMAX, OPT, outlook(600.0))[0].r == pytest.approx(0.9)


def test_no_reversal_while_the_added_replica_starts():
    """The feedback adds a replica at 60 s; a fault during its start-up makes the next period
    worse. Algorithm 2 alone reverses ("|Δl| grew") and gives the replica back; with the hold it
    keeps it until start-up + one period have passed, and then compares with the period before
    the add, not with the start-up's."""
    no_faults = dict(faults=())
    s1, d = step(RedundancyState(r=0.0), 1200.0, RMAX, OPT, outlook(60.0, **no_faults))  # Δl +1000: add
    assert d.action == INCREASE and replicas_for(s1.r, 2) == 2
    assert s1.hold_until_s == pytest.approx(60.0 + STARTUP + PERIOD)
    # the next period is worse (a fault landed in the start-up): Δl grew from +1000 to +3000
    alone, d = step(s1, 3200.0, RMAX, RedundancyOptions(hold_periods=0.0), outlook(120.0, **no_faults))
    assert d.action == DECREASE and replicas_for(alone.r, 2) == 1 and "reverse" in d.reason
    held, d = step(s1, 3200.0, RMAX, OPT, outlook(120.0, **no_faults))
    assert d.action == HOLD and held.r == s1.r and replicas_for(held.r, 2) == 2 and "hold" in d.reason
    assert held.last_delta_ms == pytest.approx(1000.0)  # the start-up's period is not remembered
    # over-performing inside the hold is not a reason to give it back either
    calm, d = step(s1, 20.0, RMAX, OPT, outlook(120.0, **no_faults))
    assert d.action == HOLD and calm.r == s1.r
    # after the hold (128.3 s): the rules act again, compared with the period before the add
    after, d = step(held, 500.0, RMAX, OPT, outlook(180.0, **no_faults))  # Δl +300 < +1000: shrank, keep going
    assert d.action == INCREASE and after.r > held.r and after.hold_until_s is None
    later, d = step(held, 20.0, RMAX, OPT, outlook(180.0, **no_faults))  # over-performing: free to decrease
    assert d.action == DECREASE and later.r < held.r


def test_a_proactive_give_back_waits_for_the_hold():
    s1, _ = step(RedundancyState(r=0.0), 190.0, RMAX, OPT, outlook(600.0, [500.0, 550.0]))
    assert s1.r == pytest.approx(1.0)
    # the faults are out of the window at 680 s, but the replica started at 600 s is in its hold (668.3 s)
    s2, d = step(s1, 20.0, RMAX, OPT, outlook(660.0, [500.0, 550.0]))
    assert s2.r == pytest.approx(1.0) and s2.proactive and d.action == HOLD
    s3, d = step(s2, 20.0, RMAX, OPT, outlook(720.0, [500.0, 550.0]))
    assert d.action == DECREASE and s3.r == 0.0


# --------------------------------------------------------------------------------------------
# hypothesis


@st.composite
def options(draw):
    r_min = draw(st.floats(0.0, 1.0))
    return RedundancyOptions(
        delta_min=draw(st.floats(0.01, 0.5)), alpha_increase=draw(st.floats(0.0, 100.0)),
        alpha_decrease=draw(st.floats(0.0, 100.0)), perf_margin=draw(st.floats(0.0, 0.9)),
        r_min=r_min, r_max=r_min + draw(st.floats(0.0, 3.0)))


latencies = st.lists(st.none() | st.floats(0.0, 1e5), min_size=1, max_size=40)


@PROPS
@given(opts=options(), lats=latencies, bound=st.floats(1.0, 1e4), r0=st.floats(0.0, 10.0))
def test_r_always_within_its_limits(opts, lats, bound, r0):
    s = RedundancyState(r=r0)
    for lat in lats:
        before = s
        s, d = step(s, lat, bound, opts)
        assert opts.r_min <= s.r <= opts.r_max
        assert s.direction in (-1, 0, 1) and d.r == s.r and d.r_before == before.r
        moved = s.r - min(opts.r_max, max(opts.r_min, before.r))
        assert {INCREASE: moved > 0, DECREASE: moved < 0, HOLD: moved == 0}[d.action]
        assert d.reason


@PROPS
@given(opts=options(), lats=latencies, bound=st.floats(1.0, 1e4), r0=st.floats(0.0, 10.0),
       faults=st.lists(st.floats(0.0, 3600.0), max_size=20), stop=st.floats(0.0, 60.0),
       util=st.none() | st.floats(0.0, 2.0), startup=st.floats(0.0, 120.0))
def test_r_within_its_limits_with_an_outlook_and_never_falls_in_a_hold(opts, lats, bound, r0, faults, stop, util,
                                                                          startup):
    s, now = RedundancyState(r=r0), 0.0
    for lat in lats:
        now += 60.0
        before = s
        s, d = step(s, lat, bound, opts, Outlook(now, 60.0, startup, faults, stop, util))
        assert opts.r_min <= s.r <= opts.r_max and d.r == s.r and d.reason
        r_before = min(opts.r_max, max(opts.r_min, before.r))
        assert {INCREASE: s.r > r_before, DECREASE: s.r < r_before, HOLD: s.r == r_before}[d.action]
        if before.hold_until_s is not None and now < before.hold_until_s:
            assert s.r >= r_before


@PROPS
@given(opts=options(), bound=st.floats(1.0, 1e4), frac=st.floats(0.0, 0.999), r0=st.floats(0.0, 3.0),
       direction=st.sampled_from([-1, 0, 1]), last=st.none() | st.floats(-1e4, 1e4))
def test_never_moves_inside_the_margin(opts, bound, frac, r0, direction, last):
    s0 = RedundancyState(r=min(opts.r_max, max(opts.r_min, r0)), direction=direction, last_delta_ms=last)
    latency = bound * (1 - opts.perf_margin * frac)
    # A margin of a few ulps rounds the latency out of it: that case is not "inside the margin".
    assume(-opts.perf_margin * bound <= latency - bound <= 0)
    s1, d = step(s0, latency, bound, opts)
    assert d.action == HOLD and s1.r == s0.r
