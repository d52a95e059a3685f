"""The redundancy manager (POLICIES.md §6, Dynamo [002] Algorithm 2): plan.redundancy.

Table tests for each rule of the hill-climb, options validation, the replica and speculation
mappings, synthetic latency curves it must settle on, then hypothesis properties. Pure: no
Spark, no database.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import assume, given, settings, strategies as st

from streamops.plan.redundancy import (
    DECREASE,
    HOLD,
    INCREASE,
    RedundancyOptions,
    RedundancyState,
    initial_state,
    replicas_for,
    speculation_conf,
    step,
    step_size,
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
@given(opts=options(), bound=st.floats(1.0, 1e4), frac=st.floats(0.0, 0.999), r0=st.floats(0.0, 3.0),
       direction=st.sampled_from([-1, 0, 1]), last=st.none() | st.floats(-1e4, 1e4))
def test_never_moves_inside_the_margin(opts, bound, frac, r0, direction, last):
    s0 = RedundancyState(r=min(opts.r_max, max(opts.r_min, r0)), direction=direction, last_delta_ms=last)
    latency = bound * (1 - opts.perf_margin * frac)
    # A margin of a few ulps rounds the latency out of it: that case is not "inside the margin".
    assume(-opts.perf_margin * bound <= latency - bound <= 0)
    s1, d = step(s0, latency, bound, opts)
    assert d.action == HOLD and s1.r == s0.r
