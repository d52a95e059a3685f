"""Pure control policies (POLICIES.md §2–§4): analyze.stats, analyze.fuzzy, plan.operator,
plan.cost and plan.application.

Table tests (one row per case, boundaries included) per policy, then hypothesis properties:
the bucket never over-grants, capacity bounds are never exceeded, and no policy flaps under a
constant load. Nothing here touches Spark or the database.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from streamops.analyze.fuzzy import bottleneck_score, bottleneck_scores
from streamops.analyze.stats import StageStats, busy_fraction, ds2_target, true_rate_per_core
from streamops.plan import operator as operator_mod
from streamops.plan.application import (
    AppView,
    application_cycle,
    edf_step,
    maintenance_window,
    proportional,
)
from streamops.plan.cost import PRIOR_MS, PRIOR_MS_PER_MB, CostModel, Observation
from streamops.plan.model import (
    ADD_REPLICA,
    MIGRATE,
    PRESTAGE,
    RELEASE,
    SCALE_IN,
    SCALE_OUT,
    AppState,
    OperatorState,
    Request,
)
from streamops.plan.operator import OperatorContext, PoolRoom, operator_cycle, pick_migration_target
from streamops.plan.options import AppOptions, OperatorOptions

UTC = UTC
OPT = OperatorOptions()
PROPS = settings(max_examples=200, deadline=None)
POLICY_NAMES = ("edf", "threshold3", "ds2", "mpc")
SPAN = 120.0  # a full default window


# --------------------------------------------------------------------------------------------
# helpers


def mk_stats(S: float | None = None, *, cores: int = 2, span_s: float = SPAN, **kw) -> StageStats:
    """A StageStats with sensible defaults; `S` sets the busy fraction (busy_ms = S · span)."""
    base = dict(stage_id="s1", app="app", pool="p0", cores=cores, min_cores=1, max_cores=8,
                state_partitions=4, span_s=span_s, batches=60, input_rows=12_000,
                busy_ms=0.5 * span_s * 1000.0, backlog_rows=0.0, backlog_growth_rps=0.0,
                latency_p95_ms=100.0, state_bytes=1e6, host_cpu=None, host_mem=None)
    if S is not None:
        base["busy_ms"] = S * span_s * 1000.0
    base.update(kw)
    return StageStats(**base)


def demand_stats(input_rate: float, rate_per_core: float, cores: int, *, backlog: float = 0.0,
                 span_s: float = SPAN, **kw) -> StageStats:
    """Stats of a stage with a given demand (rows/s) and true rate per core (rows per busy core-s):
    the busy time is what `cores` cores need to process the input."""
    rows = input_rate * span_s
    busy_ms = kw.pop("busy_ms", rows / (rate_per_core * cores) * 1000.0)
    return mk_stats(cores=cores, span_s=span_s, input_rows=rows, busy_ms=busy_ms, backlog_rows=backlog, **kw)


def ctx(pools: dict[str, PoolRoom] | None = None, seed: int = 0, r_max_ms: float = 200.0) -> OperatorContext:
    return OperatorContext(r_max_ms=r_max_ms, cost=CostModel(), pools=pools or {}, rng=random.Random(seed))


def run(policy: str, s: StageStats, state: OperatorState = OperatorState(), c: OperatorContext | None = None,
        opt: OperatorOptions = OPT):
    return operator_cycle(policy, s, opt, state, c or ctx())


def actions(reqs) -> list[str]:
    return [r.action for r in reqs]


def req(stage: str, action: str, gain: float = 0.1, cost_ms: float = 10_000.0, cores: int | None = 3,
        pool: str | None = None) -> Request:
    return Request(stage, action, cores, pool, gain, cost_ms, "test", app="app")


APP = AppView("app", r_max_ms=200.0, window_cron="0 3 * * *", window_minutes=30, window_max_actions=2)
NOON = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)  # outside the 03:00–03:30 window
IN_WINDOW = datetime(2024, 1, 1, 3, 10, tzinfo=UTC)
NEXT_OPEN = datetime(2024, 1, 2, 3, 0, tzinfo=UTC)
LOW_RESPONSE = 100.0  # ≤ β·R_max = 150: no token added


def app_cycle(requests, *, state=AppState(tokens=1.0), response=LOW_RESPONSE, growing=False, now=NOON,
              app=APP, **opts):
    return application_cycle(app, AppOptions(**opts), state, list(requests), response, growing, now)


def by_outcome(decisions, outcome: str) -> list[Request]:
    return [d.request for d in decisions if d.outcome == outcome]


# --------------------------------------------------------------------------------------------
# analyze.stats


@pytest.mark.parametrize("busy_ms, span_s, expected", [
    (60_000.0, 120.0, 0.5),
    (0.0, 120.0, 0.0),
    (240_000.0, 120.0, 1.0),  # capped at 1
    (1_000.0, 0.0, 0.0),  # empty window
])
def test_busy_fraction(busy_ms, span_s, expected):
    assert busy_fraction(mk_stats(busy_ms=busy_ms, span_s=span_s)) == pytest.approx(expected)


@pytest.mark.parametrize("input_rows, busy_ms, cores, expected", [
    (12_000, 60_000.0, 2, 100.0),  # 12 000 rows / (60 s × 2 cores)
    (12_000, 30_000.0, 4, 100.0),
    (0, 60_000.0, 2, None),  # no input
    (12_000, 0.0, 2, None),  # no busy time
])
def test_true_rate_per_core(input_rows, busy_ms, cores, expected):
    got = true_rate_per_core(mk_stats(input_rows=input_rows, busy_ms=busy_ms, cores=cores))
    assert got == (None if expected is None else pytest.approx(expected))


# --------------------------------------------------------------------------------------------
# EDF thresholds (§3.1)


def _scale_in_bound(n: int) -> float:
    """The S at which n·S/(n−1) equals c·S_out = 0.525."""
    return OPT.c * OPT.s_out * (n - 1) / n


EPS = 1e-6


@pytest.mark.parametrize("S, cores, min_cores, max_cores, expected", [
    # scale out by one when S > S_out = 0.7 (strict)
    (0.7 + EPS, 2, 1, 8, (SCALE_OUT, 3)),
    (0.7, 2, 1, 8, None),
    (0.7 - EPS, 2, 1, 8, None),
    (0.95, 7, 1, 8, (SCALE_OUT, 8)),
    (1.0, 8, 1, 8, None),  # at max_cores: no scale-out
    (0.9, 4, 1, 4, None),
    # scale in by one when n·S/(n−1) < 0.525 (strict), n = 2, 3, 4
    (_scale_in_bound(2) - EPS, 2, 1, 8, (SCALE_IN, 1)),
    (_scale_in_bound(2), 2, 1, 8, None),
    (_scale_in_bound(2) + EPS, 2, 1, 8, None),
    (_scale_in_bound(3) - EPS, 3, 1, 8, (SCALE_IN, 2)),
    (_scale_in_bound(3), 3, 1, 8, None),
    (_scale_in_bound(3) + EPS, 3, 1, 8, None),
    (_scale_in_bound(4) - EPS, 4, 1, 8, (SCALE_IN, 3)),
    (_scale_in_bound(4), 4, 1, 8, None),
    (_scale_in_bound(4) + EPS, 4, 1, 8, None),
    # at min_cores: no scale-in, however idle
    (0.0, 1, 1, 8, None),
    (0.01, 3, 3, 8, None),
    (0.0, 4, 3, 8, (SCALE_IN, 3)),
])
def test_edf_thresholds(S, cores, min_cores, max_cores, expected):
    s = mk_stats(S, cores=cores, min_cores=min_cores, max_cores=max_cores)
    reqs, state = run("edf", s)
    assert state == OperatorState()
    if expected is None:
        assert reqs == []
    else:
        [r] = reqs
        assert (r.action, r.target_cores) == expected
        assert r.stage_id == "s1" and r.app == "app" and r.gain > 0 and r.cost_ms > 0


ROOMY = {"near": PoolRoom(free_cores=8, delay_ms=5), "mid": PoolRoom(free_cores=8, delay_ms=20),
         "far": PoolRoom(free_cores=8, delay_ms=80)}


@pytest.mark.parametrize("host_cpu, pools, S, expected_action", [
    (0.71, ROOMY, 0.5, MIGRATE),
    (0.99, {"only": PoolRoom(2, 50)}, 0.5, MIGRATE),  # exactly enough room (n = 2)
    (0.70, ROOMY, 0.5, None),  # U_r == U_max: strict
    (0.50, ROOMY, 0.5, None),
    (0.95, {}, 0.5, None),  # no other pool
    (0.95, {"small": PoolRoom(1, 5), "neg": PoolRoom(-3, 1)}, 0.5, None),  # no pool has room for 2 cores
    (0.95, {"small": PoolRoom(1, 5)}, 0.9, SCALE_OUT),  # no migration possible: the S rule still applies
])
def test_edf_migration(host_cpu, pools, S, expected_action):
    reqs, _ = run("edf", mk_stats(S, host_cpu=host_cpu), c=ctx(pools))
    assert actions(reqs) == ([] if expected_action is None else [expected_action])
    for r in reqs:
        if r.action == MIGRATE:
            assert r.target_pool in pools and pools[r.target_pool].free_cores >= 2
            assert r.target_cores == 2  # a migration keeps the parallelism
            assert r.gain > 0


def test_edf_migration_prefers_closer_pools_and_skips_full_ones():
    pools = {**ROOMY, "full": PoolRoom(free_cores=1, delay_ms=1)}  # closest, but no room for 2 cores
    picks = Counter()
    for seed in range(3000):
        reqs, _ = run("edf", mk_stats(0.5, host_cpu=0.9), c=ctx(pools, seed=seed))
        [r] = reqs
        picks[r.target_pool] += 1
    assert picks["full"] == 0
    assert set(picks) == {"near", "mid", "far"}  # random, not always the closest
    assert picks["near"] > picks["mid"] > picks["far"]
    assert picks["near"] / 3000 > 0.4  # clearly biased towards the closest


def test_migration_target_none_without_room():
    assert pick_migration_target({"a": PoolRoom(1, 1), "b": PoolRoom(0, 2)}, 2, random.Random(1)) is None
    assert pick_migration_target({}, 1, random.Random(1)) is None


def test_edf_gain_order_migration_over_scale_in():
    """For equal cost, a migration outranks an EDF scale-in (EDF's order)."""
    mig, _ = run("edf", mk_stats(0.5, host_cpu=0.701), c=ctx(ROOMY))
    sin, _ = run("edf", mk_stats(0.0, cores=2))
    assert mig[0].action == MIGRATE and sin[0].action == SCALE_IN
    assert mig[0].gain > sin[0].gain


# --------------------------------------------------------------------------------------------
# Three thresholds on the bottleneck score (§3.2): 25 / 65 / 80, release below 65 − 10 = 55


@pytest.fixture
def score_is(monkeypatch):
    """Make threshold3 see a chosen bottleneck score."""
    def set_score(value: float) -> None:
        monkeypatch.setattr(operator_mod, "bottleneck_score", lambda cpu, mem, data: value)
    return set_score


KEEP = "keep"  # the state after the cycle is not asserted


@pytest.mark.parametrize("score, prestaged, cores, min_cores, max_cores, expected, prestaged_after", [
    # not pre-staged
    (24.9, False, 2, 1, 8, [SCALE_IN], False),
    (25.0, False, 2, 1, 8, [], False),
    (25.1, False, 2, 1, 8, [], False),
    (50.0, False, 2, 1, 8, [], False),
    (65.0, False, 2, 1, 8, [], False),
    (65.1, False, 2, 1, 8, [PRESTAGE], True),
    (80.0, False, 2, 1, 8, [PRESTAGE], True),
    (80.1, False, 2, 1, 8, [SCALE_OUT], False),
    (100.0, False, 2, 1, 8, [SCALE_OUT], False),
    (10.0, False, 1, 1, 8, [], False),  # at min_cores
    (90.0, False, 8, 1, 8, [], False),  # at max_cores: no scale-out
    (70.0, False, 8, 1, 8, [], False),  # at max_cores: nothing to pre-stage
    # pre-staged: hysteresis, no second pre-stage
    (70.0, True, 2, 1, 8, [], True),
    (80.0, True, 2, 1, 8, [], True),
    (65.0, True, 2, 1, 8, [], True),
    (55.0, True, 2, 1, 8, [], True),  # not below 65 − 10
    (54.9, True, 2, 1, 8, [RELEASE], False),
    (30.0, True, 2, 1, 8, [RELEASE], False),
    (20.0, True, 2, 1, 8, [RELEASE, SCALE_IN], False),
    (90.0, True, 2, 1, 8, [SCALE_OUT], KEEP),  # scale out using what was staged
])
def test_threshold3_table(score_is, score, prestaged, cores, min_cores, max_cores, expected, prestaged_after):
    score_is(score)
    s = mk_stats(0.5, cores=cores, min_cores=min_cores, max_cores=max_cores)
    reqs, state = run("threshold3", s, OperatorState(prestaged=prestaged))
    assert actions(reqs) == expected
    if prestaged_after != KEEP:
        assert state.prestaged is prestaged_after
    for r in reqs:
        if r.action == SCALE_IN:
            assert r.target_cores == cores - 1
        if r.action in (SCALE_OUT, PRESTAGE):
            assert cores < r.target_cores <= max_cores
        if r.action in (PRESTAGE, RELEASE):
            assert r.cost_ms == 0.0  # local: no restart


def test_threshold3_hysteresis_sequence(score_is):
    """One pre-stage on entering the alarming band, held down to 55, released below, re-staged later."""
    state = OperatorState()
    seen = []
    for score in (40, 70, 75, 66, 60, 56, 55, 54.9, 60, 70, 64):
        score_is(score)
        reqs, state = run("threshold3", mk_stats(0.5), state)
        seen.append(actions(reqs))
    assert seen == [[], [PRESTAGE], [], [], [], [], [], [RELEASE], [], [PRESTAGE], []]
    assert state.prestaged is True


@pytest.mark.parametrize("input_rate, rate_per_core, cores, max_cores, expected_target", [
    (1000.0, 500.0, 2, 16, 3),  # DS2 n* = ceil(1000 / 350) = 3
    (1000.0, 100.0, 2, 16, 15),  # n* = ceil(1000 / 70) = 15
    (1000.0, 100.0, 2, 8, 8),  # capped at max_cores
    (10.0, 1000.0, 2, 16, 3),  # DS2 says fewer: still at least +1
])
def test_threshold3_scale_out_sized_by_ds2(score_is, input_rate, rate_per_core, cores, max_cores, expected_target):
    score_is(95.0)
    s = demand_stats(input_rate, rate_per_core, cores, max_cores=max_cores)
    [r], _ = run("threshold3", s)
    assert (r.action, r.target_cores) == (SCALE_OUT, expected_target)


def test_threshold3_on_real_scores():
    idle = mk_stats(0.0, cores=3, input_rows=0, busy_ms=0.0, host_mem=0.1)
    [r], _ = run("threshold3", idle)
    assert (r.action, r.target_cores) == (SCALE_IN, 2)
    saturated = demand_stats(1000.0, 100.0, 4, backlog=50_000.0, host_mem=0.3, busy_ms=SPAN * 1000.0)
    [r], _ = run("threshold3", saturated)
    assert r.action == SCALE_OUT and r.target_cores > 4


def test_threshold3_never_scales_out_an_idle_stage_with_moderate_memory():
    idle = mk_stats(0.0, cores=2, input_rows=0, busy_ms=0.0, host_mem=0.55)
    reqs, _ = run("threshold3", idle)
    assert SCALE_OUT not in actions(reqs)


# --------------------------------------------------------------------------------------------
# Fuzzy bottleneck score (§3.2)

GRID_CPU = np.linspace(0.0, 1.0, 21)
GRID_MEM = np.linspace(0.0, 1.0, 21)
GRID_DATA = np.linspace(0.0, 2.4, 25)


def _grid_scores() -> np.ndarray:
    C, M, D = np.meshgrid(GRID_CPU, GRID_MEM, GRID_DATA, indexing="ij")
    return bottleneck_scores(C.ravel(), M.ravel(), D.ravel()).reshape(C.shape)


@given(cpu=st.floats(-1, 2), mem=st.floats(-1, 2), data=st.floats(-1, 10))
@PROPS
def test_fuzzy_score_in_range(cpu, mem, data):
    assert 0.0 <= bottleneck_score(cpu, mem, data) <= 100.0


def test_fuzzy_vectorized_matches_scalar():
    rng = np.random.default_rng(3)
    cpu, mem, data = rng.random(50), rng.random(50), rng.random(50) * 2.5
    vec = bottleneck_scores(cpu, mem, data)
    assert vec.shape == (50,)
    assert vec == pytest.approx([bottleneck_score(c, m, d) for c, m, d in zip(cpu, mem, data, strict=True)])


@pytest.mark.parametrize("cpu, mem, data, low, high", [
    (0.0, 0.0, 0.0, None, 25.0),  # idle → below δ1
    (0.05, 0.1, 0.1, None, 25.0),
    (0.1, 0.2, 0.2, None, 25.0),
    (1.0, 0.0, 2.0, 80.0, None),  # saturated → above δ2
    (1.0, 0.3, 3.0, 80.0, None),
    (0.95, 0.2, 1.9, 80.0, None),
    (0.0, 0.0, 2.0, 80.0, None),  # demand at twice the capacity
])
def test_fuzzy_idle_and_saturated(cpu, mem, data, low, high):
    score = bottleneck_score(cpu, mem, data)
    if low is not None:
        assert score > low
    if high is not None:
        assert score < high


@pytest.mark.parametrize("axis, name", [(0, "cpu"), (1, "mem"), (2, "data")])
def test_fuzzy_monotone_non_decreasing(axis, name):
    """More CPU, memory or load must never make a stage look less of a bottleneck."""
    diff = np.diff(_grid_scores(), axis=axis)
    i, j, k = np.unravel_index(np.argmin(diff), diff.shape)
    at = f"cpu={GRID_CPU[i]:.2f}, mem={GRID_MEM[j]:.2f}, load ratio={GRID_DATA[k]:.2f}"
    assert diff.min() >= -1e-9, f"score drops by {-diff.min():.2f} when {name} rises one grid step from {at}"


# --------------------------------------------------------------------------------------------
# DS2 rate-based target (§3.3)


@pytest.mark.parametrize("input_rate, rate_per_core, backlog, cores, min_cores, max_cores, n_star", [
    (1000.0, 500.0, 0.0, 2, 1, 16, 3),  # ceil(1000 / (500 × 0.7)) = ceil(2.857)
    (1000.0, 500.0, 60_000.0, 2, 1, 16, 6),  # + 60 000 / 60 s: ceil(2000 / 350) = ceil(5.714)
    (1000.0, 500.0, 60_000.0, 2, 1, 4, 4),  # clamped to max
    (700.0, 100.0, 0.0, 2, 1, 16, 10),  # exactly 10: no extra core from rounding
    (700.0, 100.0, -5_000.0, 2, 1, 16, 10),  # a negative backlog counts as none
    (10.0, 100.0, 0.0, 4, 3, 16, 3),  # clamped to min
    (0.0, 100.0, 0.0, 4, 1, 16, 4),  # no input: no rate, keep n
])
def test_ds2_target_formula(input_rate, rate_per_core, backlog, cores, min_cores, max_cores, n_star):
    s = demand_stats(input_rate, rate_per_core, cores, backlog=backlog, min_cores=min_cores, max_cores=max_cores)
    assert ds2_target(s) == n_star
    if input_rate > 0:
        raw = (input_rate + max(0.0, backlog) / 60.0) / (rate_per_core * 0.7)
        assert n_star == max(min_cores, min(max_cores, math.ceil(raw - 1e-9)))


@pytest.mark.parametrize("input_rate, rate_per_core, backlog, cores, min_cores, max_cores, expected", [
    (1000.0, 500.0, 0.0, 2, 1, 16, (SCALE_OUT, 3)),
    (1000.0, 500.0, 60_000.0, 2, 1, 16, (SCALE_OUT, 6)),  # one step, not +1
    (1000.0, 500.0, 60_000.0, 2, 1, 4, (SCALE_OUT, 4)),
    (1000.0, 500.0, 0.0, 3, 1, 16, None),  # at n*
    # scale-in sizes with the 0.6 margin: n_in = ceil(demand / (rate × 0.6))
    (420.0, 100.0, 0.0, 10, 1, 16, (SCALE_IN, 7)),  # n* = 6 at 0.7, 7 at 0.6
    (420.0, 100.0, 0.0, 7, 1, 16, None),
    (360.0, 100.0, 0.0, 10, 1, 16, (SCALE_IN, 6)),  # 360 / 60 = 6 exactly
    (480.0, 100.0, 0.0, 8, 1, 16, None),  # n* = 7 at 0.7 but 8 at 0.6: inside the band, no scale-in
    (480.0, 100.0, 0.0, 7, 1, 16, None),
    (60.0, 100.0, 0.0, 10, 4, 16, (SCALE_IN, 4)),  # clamped to min
    (60.0, 100.0, 0.0, 4, 4, 16, None),  # at min
    (0.0, 100.0, 0.0, 4, 1, 16, None),  # no input: no rate, no decision
])
def test_ds2_policy(input_rate, rate_per_core, backlog, cores, min_cores, max_cores, expected):
    s = demand_stats(input_rate, rate_per_core, cores, backlog=backlog, min_cores=min_cores, max_cores=max_cores)
    reqs, _ = run("ds2", s)
    if expected is None:
        assert reqs == []
    else:
        [r] = reqs
        assert (r.action, r.target_cores) == expected


def test_a_ds2_scale_out_driven_by_a_backlog_says_so():
    """A topic's lag is the backlog: the reason names it and what it adds to the demand, so a
    reader of `decisions` can tell a lag-driven scale-out from a rate-driven one."""
    [r], _ = run("ds2", demand_stats(100.0, 500.0, 1, backlog=60_000.0, max_cores=4))
    assert (r.action, r.target_cores) == (SCALE_OUT, 4)
    assert "backlog 60,000 rows to catch up in 60s: +1,000/s" in r.reason, r.reason
    [r], _ = run("ds2", demand_stats(1000.0, 500.0, 2, max_cores=16))
    assert "backlog" not in r.reason, r.reason


# --------------------------------------------------------------------------------------------
# operator_cycle: the window guard


@pytest.mark.parametrize("policy", POLICY_NAMES)
@pytest.mark.parametrize("span_s, batches, acts", [
    (95.9, 60, False),  # < 0.8 × 120 s: half-filled window
    (30.0, 60, False),
    (0.0, 60, False),
    (96.0, 0, False),  # no batch
    (SPAN, 0, False),
    (96.0, 60, True),  # exactly 0.8 full
    (SPAN, 60, True),
])
def test_operator_cycle_needs_a_filled_window(score_is, policy, span_s, batches, acts):
    score_is(95.0)  # threshold3 would scale out
    s = demand_stats(1000.0, 100.0, 2, span_s=span_s, batches=batches, busy_ms=span_s * 1000.0)
    state = OperatorState(prestaged=True)
    reqs, after = run(policy, s, state)
    if acts:
        assert SCALE_OUT in actions(reqs)
    else:
        assert reqs == [] and after == state


# --------------------------------------------------------------------------------------------
# Cost model (§3.4)

MB = 1e6


def test_cost_prior_before_history():
    m = CostModel()
    assert m("s1", "scale_out", 0) == PRIOR_MS["scale_out"]
    assert m("s1", "migrate", 0) == PRIOR_MS["migrate"]
    assert m("s1", "scale_in", 100 * MB) == pytest.approx(PRIOR_MS["scale_in"] + 100 * PRIOR_MS_PER_MB)
    assert m("s1", "something_else", 0) == 10_000.0
    assert m("s1", "migrate", 0) > m("s1", "scale_out", 0)  # a migration also copies the checkpoint


@pytest.mark.parametrize("history, stage, action, state_mb, expected", [
    # one point: its value, whatever the state size
    ([("s1", "scale_out", 10, 4000)], "s1", "scale_out", 10, 4000),
    ([("s1", "scale_out", 10, 4000)], "s1", "scale_out", 500, 4000),
    # several points at one size: the mean
    ([("s1", "scale_out", 10, 4000), ("s1", "scale_out", 10, 6000)], "s1", "scale_out", 99, 5000),
    # ≥ 2 distinct sizes: a line, downtime = 1000 + 20·MB
    ([("s1", "scale_out", 0, 1000), ("s1", "scale_out", 100, 3000)], "s1", "scale_out", 50, 2000),
    ([("s1", "scale_out", 0, 1000), ("s1", "scale_out", 100, 3000)], "s1", "scale_out", 200, 5000),
    ([("s1", "scale_out", 0, 1000), ("s1", "scale_out", 50, 2000), ("s1", "scale_out", 100, 3000)],
     "s1", "scale_out", 25, 1500),
    # a falling fit is flattened: more state never means less downtime
    ([("s1", "scale_out", 0, 3000), ("s1", "scale_out", 100, 1000)], "s1", "scale_out", 100, 2000),
    # per-stage history first
    ([("s1", "scale_out", 10, 4000), ("s2", "scale_out", 10, 9000)], "s1", "scale_out", 10, 4000),
    # no history for the stage: the same action over all stages
    ([("s2", "scale_out", 10, 4000), ("s3", "scale_out", 10, 6000)], "s1", "scale_out", 10, 5000),
    ([("s2", "scale_out", 0, 1000), ("s3", "scale_out", 100, 3000)], "s1", "scale_out", 50, 2000),
    # other actions' history does not count: the prior
    ([("s1", "scale_in", 10, 1)], "s1", "migrate", 0, PRIOR_MS["migrate"]),
])
def test_cost_model_learning(history, stage, action, state_mb, expected):
    m = CostModel(Observation(sid, act, mb * MB, ms) for sid, act, mb, ms in history)
    assert m(stage, action, state_mb * MB) == pytest.approx(expected)


def test_cost_model_add_and_never_negative():
    m = CostModel()
    m.add(Observation("s1", "scale_out", 100 * MB, 1000))
    assert m("s1", "scale_out", 0) == 1000
    m.add(Observation("s1", "scale_out", 200 * MB, 11_000))  # steep line: 100 ms/MB, negative at 0 MB
    assert m("s1", "scale_out", 300 * MB) == pytest.approx(21_000)
    assert m("s1", "scale_out", 0) == 0.0


def test_operator_requests_carry_the_learned_cost():
    cost = CostModel([Observation("s1", "scale_out", 1 * MB, 1234.0)])
    c = OperatorContext(r_max_ms=200, cost=cost)
    [r], _ = run("edf", mk_stats(0.9), c=c)
    assert r.cost_ms == 1234.0


# --------------------------------------------------------------------------------------------
# Application Manager (§4): token generators


@pytest.mark.parametrize("response, r_max, beta, expected", [
    (None, 200.0, 0.75, 0.0),
    (100.0, 200.0, 0.75, 0.0),
    (150.0, 200.0, 0.75, 0.0),  # exactly β·R_max: strict
    (150.01, 200.0, 0.75, 1.0),
    (500.0, 200.0, 0.75, 1.0),
    (100.01, 200.0, 0.5, 1.0),
    (100.0, 200.0, 0.5, 0.0),
])
def test_edf_step_generator(response, r_max, beta, expected):
    assert edf_step(response, r_max, beta) == expected


@pytest.mark.parametrize("response, r_max, beta, expected", [
    (None, 200.0, 0.75, 0.0),
    (0.0, 200.0, 0.75, 0.0),
    (150.0, 200.0, 0.75, 0.0),  # β·R_max
    (162.5, 200.0, 0.75, 0.25),
    (175.0, 200.0, 0.75, 0.5),
    (200.0, 200.0, 0.75, 1.0),  # R_max
    (400.0, 200.0, 0.75, 1.0),  # capped
    (150.0, 200.0, 0.5, 0.5),
])
def test_proportional_generator(response, r_max, beta, expected):
    assert proportional(response, r_max, beta) == pytest.approx(expected)


@given(a=st.floats(0, 1000), b=st.floats(0, 1000))
@PROPS
def test_proportional_generator_is_monotone_and_bounded(a, b):
    lo, hi = sorted((a, b))
    assert 0.0 <= proportional(lo, 200.0, 0.75) <= proportional(hi, 200.0, 0.75) <= 1.0


# --------------------------------------------------------------------------------------------
# Application Manager: token bucket


@pytest.mark.parametrize("capacity, tokens, response, generator, n_requests, n_granted", [
    (1.0, 1.0, LOW_RESPONSE, "edf_step", 3, 1),
    (1.0, 0.0, LOW_RESPONSE, "edf_step", 3, 0),
    (1.0, 0.0, 150.0, "edf_step", 3, 0),  # exactly β·R_max: no token
    (1.0, 0.0, 151.0, "edf_step", 3, 1),  # refilled at the end of the interval
    (1.0, 1.0, 151.0, "edf_step", 3, 1),  # capped at B = 1
    (3.0, 2.5, 151.0, "edf_step", 5, 3),  # min(B, 3.5) = 3
    (3.0, 1.5, None, "edf_step", 5, 1),  # floor(1.5)
    (3.0, 3.0, LOW_RESPONSE, "edf_step", 2, 2),  # fewer requests than tokens
    (2.0, 0.4, 175.0, "proportional", 3, 0),  # 0.4 + 0.5 = 0.9
    (2.0, 0.6, 175.0, "proportional", 3, 1),  # 0.6 + 0.5 = 1.1
    (2.0, 1.5, 250.0, "proportional", 3, 2),  # 1.5 + 1 = 2.5 → capped at 2
    (0.5, 0.5, 1000.0, "edf_step", 3, 0),  # B < 1 can never grant
])
def test_token_bucket_grants_best_scale_outs(capacity, tokens, response, generator, n_requests, n_granted):
    # distinct gain/cost; listed worst first so the order has to come from the value
    requests = [req(f"s{i}", SCALE_OUT, gain=0.1 * (i + 1), cost_ms=1000.0 * (5 - i % 3)) for i in range(n_requests)]
    decisions, state = app_cycle(requests, state=AppState(tokens=tokens), response=response,
                                 capacity=capacity, generator=generator)
    assert len(decisions) == n_requests
    granted = by_outcome(decisions, "granted")
    declined = [d for d in decisions if d.outcome == "declined"]
    best = sorted(requests, key=lambda r: r.value, reverse=True)[:n_granted]
    assert {r.stage_id for r in granted} == {r.stage_id for r in best}
    assert len(declined) == n_requests - n_granted
    assert all("token" in d.reason for d in declined)
    refilled = min(capacity, tokens + {"edf_step": edf_step, "proportional": proportional}[generator](response, 200.0,
                                                                                                       0.75))
    assert state.tokens == pytest.approx(refilled - n_granted)
    assert 0.0 <= state.tokens <= capacity
    spent = [d for d in decisions if d.outcome == "granted"]
    assert all(d.tokens_before - d.tokens_after == pytest.approx(1.0) for d in spent)


def test_token_bucket_decisions_follow_value_order():
    hi = req("a", SCALE_OUT, gain=0.5, cost_ms=1000)  # value 0.5 / s
    lo = req("b", SCALE_OUT, gain=2.0, cost_ms=20_000)  # value 0.1 / s: more gain, but too costly
    decisions, _ = app_cycle([lo, hi], state=AppState(tokens=1.0))
    assert by_outcome(decisions, "granted") == [hi]
    assert by_outcome(decisions, "declined") == [lo]


def test_token_bucket_refills_across_intervals():
    """A sustained SLO risk earns one token per interval, so the declined request gets through later."""
    r = req("a", SCALE_OUT)
    state = AppState(tokens=0.0)
    decisions, state = app_cycle([r], state=state, response=LOW_RESPONSE)
    assert by_outcome(decisions, "declined") == [r]
    decisions, state = app_cycle([r], state=state, response=180.0)
    assert by_outcome(decisions, "granted") == [r] and state.tokens == 0.0


@pytest.mark.parametrize("response, growing, needs_growth, urgent", [
    (201.0, True, True, True),
    (201.0, False, True, False),  # not falling behind
    (200.0, True, True, False),  # exactly R_max: strict
    (None, True, True, False),
    (180.0, True, True, False),
    (201.0, False, False, True),  # growth not required by config
])
def test_urgent_flag(response, growing, needs_growth, urgent):
    decisions, _ = app_cycle([req("a", SCALE_OUT), req("b", SCALE_OUT)], state=AppState(tokens=1.0),
                             response=response, growing=growing, urgent_needs_growth=needs_growth)
    assert all(d.urgent is urgent for d in decisions)
    granted = [d for d in decisions if d.outcome == "granted"]
    assert all(("urgent" in g.reason) is urgent for g in granted)
    # one token: urgent scale-outs are granted together on it, otherwise the best one alone
    assert len(granted) == (2 if urgent else 1)


def test_urgent_scale_outs_granted_together_share_one_token_and_nothing_else_rides_on_it():
    """A chain falling behind: its three stages' scale-outs are granted in one episode, on one
    token; a new replica still needs a token of its own (it has no restart to share)."""
    outs = [req(f"s{i}", SCALE_OUT, gain=0.1 * (i + 1)) for i in range(3)]
    decisions, state = app_cycle([*outs, req("s9", ADD_REPLICA)], state=AppState(tokens=1.0), response=201.0,
                                 growing=True)
    assert {r.stage_id for r in by_outcome(decisions, "granted")} == {"s0", "s1", "s2"}
    assert state.tokens == 0.0
    rides = [d for d in decisions if d.outcome == "granted" and d.tokens_before == d.tokens_after]
    assert len(rides) == 2 and all("on its token" in d.reason for d in rides)
    assert [d.request.action for d in decisions if d.outcome == "declined"] == [ADD_REPLICA]
    # no token at all (a bucket below one): nothing to ride on
    decisions, _ = app_cycle(outs, state=AppState(tokens=0.5), response=201.0, growing=True, capacity=0.5)
    assert not by_outcome(decisions, "granted")


@pytest.mark.parametrize("policy", ["token_bucket", "accept_all"])
def test_local_actions_granted_without_tokens(policy):
    requests = [req("a", PRESTAGE), req("b", RELEASE, cores=None)]
    decisions, state = app_cycle(requests, state=AppState(tokens=0.0), policy=policy)
    assert [d.outcome for d in decisions] == ["granted", "granted"]
    assert all(d.tokens_before == d.tokens_after == 0.0 for d in decisions)
    assert state.tokens == 0.0


def test_local_action_does_not_block_a_reconfiguration_of_the_same_stage():
    decisions, _ = app_cycle([req("a", PRESTAGE), req("a", SCALE_OUT)], state=AppState(tokens=1.0))
    assert {(d.request.action, d.outcome) for d in decisions} == {(PRESTAGE, "granted"), (SCALE_OUT, "granted")}


# --------------------------------------------------------------------------------------------
# Application Manager: controlled windows for scale-in and migration


@pytest.mark.parametrize("now, is_open, start", [
    (datetime(2024, 1, 1, 2, 59, 59, tzinfo=UTC), False, None),
    (datetime(2024, 1, 1, 3, 0, 1, tzinfo=UTC), True, datetime(2024, 1, 1, 3, 0, tzinfo=UTC)),
    (datetime(2024, 1, 1, 3, 29, 59, tzinfo=UTC), True, datetime(2024, 1, 1, 3, 0, tzinfo=UTC)),
    (datetime(2024, 1, 1, 3, 30, 0, tzinfo=UTC), False, None),  # the window is 30 min long
    (NOON, False, None),
])
def test_maintenance_window(now, is_open, start):
    w = maintenance_window(APP, now)
    assert (w.open, w.start) == (is_open, start)
    assert w.next_open > now and w.next_open.hour == 3 and w.next_open.minute == 0


@pytest.mark.parametrize("action", [SCALE_IN, MIGRATE])
@pytest.mark.parametrize("now, defer_until", [
    (NOON, NEXT_OPEN),
    (datetime(2024, 1, 1, 2, 59, tzinfo=UTC), datetime(2024, 1, 1, 3, 0, tzinfo=UTC)),
    (datetime(2024, 1, 1, 3, 30, tzinfo=UTC), NEXT_OPEN),
])
def test_disruptive_actions_deferred_outside_the_window(action, now, defer_until):
    r = req("a", action, pool="p1" if action == MIGRATE else None)
    decisions, state = app_cycle([r], state=AppState(tokens=1.0), now=now)
    [d] = decisions
    assert d.outcome == "deferred" and d.defer_until == defer_until
    assert state.tokens == 1.0 and state.window_actions == 0  # nothing spent


def test_token_bucket_never_grants_scale_in_with_a_token_outside_the_window():
    decisions, _ = app_cycle([req("a", SCALE_IN)], state=AppState(tokens=1.0), response=500.0)
    assert [d.outcome for d in decisions] == ["deferred"]


def test_a_live_scale_in_is_granted_outside_the_window_and_spends_neither_a_token_nor_its_budget():
    """Issue 46 item 4: executors given back while the query runs involve no checkpoint and no
    outage; the window and its budget are for checkpoint-based changes."""
    live = replace(req("a", SCALE_IN), live=True)
    decisions, state = app_cycle([live, req("b", SCALE_IN)], state=AppState(tokens=1.0), now=NOON)
    assert {d.request.stage_id: d.outcome for d in decisions} == {"a": "granted", "b": "deferred"}
    assert "live scale-in" in next(d.reason for d in decisions if d.outcome == "granted")
    assert state.tokens == 1.0 and state.window_actions == 0
    decisions, state = app_cycle([live], state=AppState(tokens=0.0), now=IN_WINDOW)
    assert [d.outcome for d in decisions] == ["granted"] and state.window_actions == 0, "the window's budget kept"


def test_only_a_scale_in_the_running_stage_can_take_live_is_live():
    from streamops.plan.change import Current, StageNow, live_scale_in

    cluster = StageNow(Current(cores=4, pool="c", partitions=8), pool_kind="standalone", executor_cores=2)
    assert live_scale_in(req("a", SCALE_IN, cores=2), cluster)
    assert not live_scale_in(req("a", SCALE_IN, cores=3), cluster), "not whole executors"
    assert not live_scale_in(req("a", SCALE_IN, cores=2, pool="d"), cluster), "another pool"
    assert not live_scale_in(req("a", SCALE_OUT, cores=6), cluster), "a scale-out is not a scale-in"
    local = StageNow(Current(cores=4, pool="c", partitions=8))
    assert not live_scale_in(req("a", SCALE_IN, cores=2), local), "local[N] is fixed at start"
    assert not live_scale_in(req("a", SCALE_IN, cores=2), StageNow(Current())), "not running"


def test_window_budget_granted_inside_and_reset_in_the_next_window():
    reqs = [req("a", SCALE_IN, gain=0.3), req("b", MIGRATE, gain=0.2, pool="p1"), req("c", SCALE_IN, gain=0.1)]
    # first cycle in the window: the two best, the third waits for the next window
    decisions, state = app_cycle(reqs, state=AppState(tokens=0.0), now=IN_WINDOW)
    assert [r.stage_id for r in by_outcome(decisions, "granted")] == ["a", "b"]
    [d] = [d for d in decisions if d.outcome == "deferred"]
    assert d.request.stage_id == "c" and d.defer_until == NEXT_OPEN and "budget" in d.reason
    assert state.window_actions == 2 and state.tokens == 0.0  # no token spent on disruptive actions
    # later in the same window: budget spent
    decisions, state = app_cycle([reqs[2]], state=state, now=IN_WINDOW + timedelta(minutes=10))
    assert [d.outcome for d in decisions] == ["deferred"]
    # outside: deferred, the budget is remembered but irrelevant
    decisions, state = app_cycle([reqs[2]], state=state, now=NOON)
    assert [d.outcome for d in decisions] == ["deferred"]
    # the next window: a fresh budget of 2
    decisions, state = app_cycle(reqs, state=state, now=NEXT_OPEN + timedelta(minutes=5))
    assert len(by_outcome(decisions, "granted")) == 2 and state.window_actions == 2
    assert state.window_start == NEXT_OPEN


def test_window_budget_in_partial_steps():
    state = AppState(tokens=0.0)
    outcomes = []
    for minute, stage in ((1, "a"), (5, "b"), (9, "c")):
        decisions, state = app_cycle([req(stage, SCALE_IN)], state=state,
                                     now=datetime(2024, 1, 1, 3, minute, tzinfo=UTC))
        outcomes.append(decisions[0].outcome)
    assert outcomes == ["granted", "granted", "deferred"]


def test_deferred_request_granted_at_its_defer_until():
    r = req("a", SCALE_IN)
    [d], state = app_cycle([r], state=AppState(tokens=0.0), now=datetime(2024, 1, 1, 2, 59, tzinfo=UTC))
    assert d.outcome == "deferred"
    [d2], _ = app_cycle([r], state=state, now=d.defer_until)
    assert d2.outcome == "granted"


# --------------------------------------------------------------------------------------------
# Application Manager: accept_all and one action per stage


def test_accept_all_grants_everything():
    reqs = [req("a", SCALE_OUT), req("b", SCALE_OUT), req("c", SCALE_IN), req("d", MIGRATE, pool="p1"),
            req("e", PRESTAGE)]
    decisions, state = app_cycle(reqs, state=AppState(tokens=0.0), now=NOON, policy="accept_all")
    assert [d.outcome for d in decisions] == ["granted"] * 5
    assert {d.request.stage_id for d in decisions} == set("abcde")
    assert state.tokens == 0.0


@pytest.mark.parametrize("policy, now", [("token_bucket", IN_WINDOW), ("accept_all", NOON), ("accept_all", IN_WINDOW)])
def test_never_two_reconfigurations_for_one_stage(policy, now):
    reqs = [req("x", SCALE_OUT, gain=0.5), req("x", SCALE_IN, gain=0.1), req("x", MIGRATE, gain=0.2, pool="p1"),
            req("y", SCALE_IN), req("y", MIGRATE, pool="p1")]
    decisions, _ = app_cycle(reqs, state=AppState(tokens=1.0), now=now, policy=policy)
    assert len(decisions) == len(reqs)
    granted = Counter(r.stage_id for r in by_outcome(decisions, "granted"))
    assert granted == {"x": 1, "y": 1}
    x = [r for r in by_outcome(decisions, "granted") if r.stage_id == "x"]
    assert x[0].action == SCALE_OUT  # the best for the stage
    assert all("another action" in d.reason for d in decisions if d.outcome == "declined")


# --------------------------------------------------------------------------------------------
# hypothesis: strategies


@st.composite
def stage_stats(draw) -> StageStats:
    min_cores = draw(st.integers(1, 8))
    max_cores = draw(st.integers(min_cores, 64))
    cores = draw(st.integers(min_cores, max_cores))
    span = draw(st.floats(0.0, 300.0))
    return StageStats(
        stage_id=draw(st.sampled_from(["s1", "s2"])), app="app", pool="p0",
        cores=cores, min_cores=min_cores, max_cores=max_cores,
        state_partitions=draw(st.integers(1, 64)), span_s=span, batches=draw(st.integers(0, 500)),
        input_rows=draw(st.integers(0, 10_000_000)),
        busy_ms=draw(st.floats(0.0, 1.5 * max(span, 1.0) * 1000.0)),
        backlog_rows=draw(st.floats(-1e3, 1e8)), backlog_growth_rps=draw(st.floats(-1e4, 1e4)),
        latency_p95_ms=draw(st.none() | st.floats(0.0, 1e6)),
        state_bytes=draw(st.floats(0.0, 1e11)),
        host_cpu=draw(st.none() | st.floats(0.0, 1.0)), host_mem=draw(st.none() | st.floats(0.0, 1.0)),
    )


pool_rooms = st.dictionaries(st.sampled_from(["pa", "pb", "pc", "pd"]),
                             st.builds(PoolRoom, free_cores=st.integers(-4, 64), delay_ms=st.floats(0.0, 500.0)),
                             max_size=4)


@st.composite
def app_requests(draw) -> list[Request]:
    n = draw(st.integers(0, 10))
    out = []
    for _ in range(n):
        action = draw(st.sampled_from([SCALE_OUT, SCALE_OUT, SCALE_IN, MIGRATE, PRESTAGE, RELEASE]))
        out.append(Request(draw(st.sampled_from(["a", "b", "c", "d"])), action, draw(st.integers(1, 16)),
                           "p1" if action == MIGRATE else None, draw(st.floats(0.0, 10.0)),
                           draw(st.floats(0.0, 1e5)), "h", app="app"))
    return out


# --------------------------------------------------------------------------------------------
# hypothesis: properties of the operators


@given(s=stage_stats(), pools=pool_rooms, prestaged=st.booleans(), seed=st.integers(0, 2**16),
       policy=st.sampled_from(POLICY_NAMES))
@PROPS
def test_requests_stay_within_capacity(s, pools, prestaged, seed, policy):
    reqs, state = run(policy, s, OperatorState(prestaged), ctx(pools, seed=seed))
    assert isinstance(state, OperatorState)
    assert len([r for r in reqs if r.action in (SCALE_OUT, SCALE_IN, MIGRATE)]) <= 1
    for r in reqs:
        assert r.stage_id == s.stage_id and r.app == s.app
        if r.target_cores is not None:
            assert s.min_cores <= r.target_cores <= s.max_cores
        if r.action == SCALE_OUT:
            assert r.target_cores > s.cores and r.gain > 0
        elif r.action == SCALE_IN:
            assert r.target_cores < s.cores
        elif r.action == MIGRATE:
            assert r.target_pool in pools and pools[r.target_pool].free_cores >= s.cores
            assert r.target_cores == s.cores
        elif r.action == PRESTAGE:
            assert not prestaged and r.target_cores > s.cores
        elif r.action == RELEASE:
            assert prestaged
        assert r.cost_ms >= 0 and math.isfinite(r.gain)


@given(n=st.integers(2, 32), frac=st.floats(0.0, 1.0), host_cpu=st.none() | st.floats(0.0, 0.7),
       cycles=st.integers(2, 6))
@PROPS
def test_edf_no_flapping_inside_thresholds(n, frac, host_cpu, cycles):
    """Constant load with 0.525·(n−1)/n < S < 0.7: no scale action, cycle after cycle."""
    lo, hi = _scale_in_bound(n) + 1e-9, OPT.s_out - 1e-9
    S = lo + frac * (hi - lo)
    s = mk_stats(S, cores=n, max_cores=64, host_cpu=host_cpu)
    state = OperatorState()
    for _ in range(cycles):
        reqs, state = run("edf", s, state, ctx(ROOMY))
        assert reqs == []


@given(n=st.integers(1, 32), S=st.floats(0.0, 1.0), max_extra=st.integers(0, 8))
@PROPS
def test_edf_does_not_undo_its_own_action(n, S, max_extra):
    """Apply EDF's scale action (per-replica busy S' = S·n/n' at the same demand): the next cycle
    must not request the opposite action."""
    s = mk_stats(S, cores=n, max_cores=n + max_extra)
    reqs, _ = run("edf", s)
    assume(reqs)
    [r] = reqs
    n2 = r.target_cores
    after = mk_stats(S * n / n2, cores=n2, max_cores=n + max_extra)
    reqs2, _ = run("edf", after)
    opposite = SCALE_IN if r.action == SCALE_OUT else SCALE_OUT
    assert opposite not in actions(reqs2)


@given(score=st.floats(25.0, 65.0, exclude_min=True), cycles=st.integers(2, 6))
@PROPS
def test_threshold3_no_flapping_between_thresholds(score, cycles):
    """δ1 < O ≤ δ'2 and nothing staged: nothing, cycle after cycle."""
    s = mk_stats(0.5)
    state = OperatorState()
    orig = operator_mod.bottleneck_score
    operator_mod.bottleneck_score = lambda cpu, mem, data: score
    try:
        for _ in range(cycles):
            reqs, state = run("threshold3", s, state)
            assert reqs == []
    finally:
        operator_mod.bottleneck_score = orig


@given(input_rate=st.floats(0.1, 1e5), rate_per_core=st.floats(1.0, 1e4), backlog=st.floats(0.0, 1e7),
       min_cores=st.integers(1, 4), extra=st.integers(0, 60), start=st.integers(0, 64))
@PROPS
def test_ds2_converges_in_one_step(input_rate, rate_per_core, backlog, min_cores, extra, start):
    """After applying DS2's own target at the same demand, DS2 asks for nothing more (no oscillation)."""
    max_cores = min_cores + extra
    n = min_cores + start % (extra + 1)
    s = demand_stats(input_rate, rate_per_core, n, backlog=backlog, min_cores=min_cores, max_cores=max_cores)
    reqs, _ = run("ds2", s)
    if not reqs:
        return
    [r] = reqs
    after = demand_stats(input_rate, rate_per_core, r.target_cores, backlog=backlog,
                         min_cores=min_cores, max_cores=max_cores)
    for _ in range(3):
        reqs2, _ = run("ds2", after)
        assert reqs2 == [], f"{n} → {r.target_cores} then {[(x.action, x.target_cores) for x in reqs2]}"


# --------------------------------------------------------------------------------------------
# hypothesis: properties of the Application Manager


@given(requests=app_requests(), capacity=st.sampled_from([0.5, 1.0, 2.0, 3.0]) | st.floats(0.0, 5.0),
       fill=st.floats(0.0, 1.0), response=st.none() | st.floats(0.0, 1000.0), growing=st.booleans(),
       generator=st.sampled_from(["edf_step", "proportional"]), policy=st.sampled_from(["token_bucket", "accept_all"]),
       now=st.datetimes(min_value=datetime(2024, 1, 1), max_value=datetime(2024, 1, 4), timezones=st.just(UTC)),
       window_minutes=st.integers(1, 120), max_actions=st.integers(0, 4), used=st.integers(0, 4),
       cron=st.sampled_from(["0 3 * * *", "*/30 * * * *", "15 */6 * * *"]))
@PROPS
def test_application_cycle_invariants(requests, capacity, fill, response, growing, generator, policy, now,
                                      window_minutes, max_actions, used, cron):
    app = AppView("app", 200.0, cron, window_minutes, max_actions)
    state = AppState(tokens=capacity * fill, window_start=maintenance_window(app, now).start, window_actions=used)
    opt = AppOptions(policy=policy, capacity=capacity, generator=generator)
    decisions, new = application_cycle(app, opt, state, requests, response, growing, now)

    # every request gets exactly one decision
    assert sorted(map(id, (d.request for d in decisions))) == sorted(map(id, requests))
    granted = [d.request for d in decisions if d.outcome == "granted"]
    # never two reconfigurations of one stage
    reconf = Counter(r.stage_id for r in granted if r.action in (SCALE_OUT, SCALE_IN, MIGRATE))
    assert all(v == 1 for v in reconf.values())
    # local actions always pass
    assert all(d.outcome == "granted" for d in decisions if d.request.action in (PRESTAGE, RELEASE))
    refilled = min(capacity, state.tokens + {"edf_step": edf_step, "proportional": proportional}[generator](
        response, 200.0, opt.beta))
    if policy == "token_bucket":
        # the bucket never spends more tokens than it has after the refill, a token per scale-out,
        # except that in an urgent cycle the scale-outs after the first ride on its token
        outs = [d for d in decisions if d.outcome == "granted" and d.request.action == SCALE_OUT]
        spent = [d for d in outs if d.tokens_before - d.tokens_after == pytest.approx(1.0)]
        riding = [d for d in outs if d.tokens_before == d.tokens_after]
        assert len(spent) + len(riding) == len(outs)
        assert len(spent) <= math.floor(refilled + 1e-9)
        urgent = response is not None and response > 200.0 and growing
        assert not riding or (urgent and len(spent) == 1 and all("on its token" in d.reason for d in riding))
        assert new.tokens == pytest.approx(refilled - len(spent))
        # tokens stay within [0, B]
        assert -1e-9 <= new.tokens <= capacity + 1e-9
        # disruptive actions only inside the window and within its budget
        w = maintenance_window(app, now)
        n_dis = sum(1 for r in granted if r.action in (SCALE_IN, MIGRATE))
        assert n_dis <= (max(0, max_actions - used) if w.open else 0)
        for d in decisions:
            if d.outcome == "deferred":
                assert d.request.action in (SCALE_IN, MIGRATE) and d.defer_until == w.next_open > now
    else:
        assert new.tokens == pytest.approx(refilled)
        assert all(d.outcome == "granted" or "another action" in d.reason for d in decisions)


# --------------------------------------------------------------------------------------------
# Issue 15: the cost learned per stage and mechanism; giving cores back


def test_cost_is_learned_per_stage_and_mechanism_with_the_catch_up():
    m = CostModel([Observation("s1", "scale_out", 0, 4000, "pause_resume", 6000),
                   Observation("s1", "scale_out", 0, 6000, "pause_resume", 4000),
                   Observation("s1", "scale_out", 0, 1000, "prestaged", 500)])
    # two pause-resumes: their own mean of output gap + catch-up
    assert m("s1", "scale_out", 0, "pause_resume") == pytest.approx(10_000)
    assert m.source("s1", "scale_out", "pause_resume") == "stage+mechanism"
    # one prestaged row is too few: the stage's rows of any mechanism, at a staged restart's share
    # of a pause-resume (plan.mechanisms' 10 s of 16 s): a copy staged skips the copy and repartition
    assert m.source("s1", "scale_out", "prestaged") == "stage × share"
    assert m("s1", "scale_out", 0, "prestaged") == pytest.approx((10_000 + 10_000 + 1500) / 3 * 10 / 16)
    m.add(Observation("s1", "scale_out", 0, 900, "prestaged", 300))
    assert m("s1", "scale_out", 0, "prestaged") == pytest.approx(1350)
    # without a mechanism, what the stage's scale-outs cost lately
    assert m.samples("s1", "scale_out") == 4


def test_a_mechanism_a_stage_never_used_is_learned_from_the_stages_that_did():
    """mpc prices a scale-out a step away at a staged restart (plan.operator.mpc): a stage's first
    one is estimated from every stage's staged restarts, not from its own pause-resumes."""
    m = CostModel([Observation("s1", "scale_out", 0, 15_000, "pause_resume", 15_000),
                   Observation("s2", "scale_out", 0, 4000, "prestaged", 1000),
                   Observation("s3", "scale_out", 0, 5000, "prestaged", 2000)])
    assert m.source("s1", "scale_out", "prestaged") == "all stages+mechanism"
    assert m("s1", "scale_out", 0, "prestaged") == pytest.approx(6000)
    assert m("s1", "scale_out", 0) == pytest.approx(30_000)  # no mechanism named: the stage's own
    assert CostModel()("s9", "scale_out", 0, "prestaged") == pytest.approx(10_000 * 10 / 16)  # the prior's share
    assert CostModel().source("s9", "scale_out", "prestaged") == "prior × share"


def test_a_stage_s_failure_recoveries_stand_in_for_its_pause_resume_cost():
    m = CostModel([Observation("s1", "restart", 0, 8000, "recovery"), Observation("s2", "scale_in", 0, 30_000)])
    assert m.source("s1", "scale_in", "pause_resume") == "stage restarts"
    assert m("s1", "scale_in", 0, "pause_resume") == pytest.approx(8000)
    assert m("s1", "scale_in", 0) == pytest.approx(8000)
    # another mechanism does not restart a driver from its checkpoint: all stages' scale-ins
    assert m("s1", "scale_in", 0, "live") == pytest.approx(30_000)
    assert CostModel().source("s9", "scale_out") == "prior"


def test_only_the_latest_rows_of_a_stage_count():
    from streamops.plan.cost import RECENT
    m = CostModel([Observation("s1", "scale_out", 0, 50_000)] * 5 + [Observation("s1", "scale_out", 0, 2000)] * RECENT)
    assert m("s1", "scale_out", 0) == pytest.approx(2000)


def test_a_prestaged_scale_out_asks_for_the_prestaged_cost():
    m = CostModel([Observation("s1", "scale_out", 0, 9000, "pause_resume")] * 2
                  + [Observation("s1", "scale_out", 0, 2000, "prestaged")] * 2)
    hot = demand_stats(300, 100, 2, host_mem=0.9, latency_p95_ms=400)
    c = OperatorContext(r_max_ms=200, cost=m)
    [r], _ = run("threshold3", hot, OperatorState(prestaged=True), c)
    assert r.action == SCALE_OUT and r.cost_ms == 2000
    [r], _ = run("threshold3", hot, OperatorState(prestaged=False), c)
    assert r.action == SCALE_OUT and r.cost_ms == pytest.approx(5500)


@pytest.mark.parametrize("policy", ["edf", "threshold3"])
def test_scale_in_to_ds2_gives_a_burst_s_cores_back_in_one_step(policy):
    after_burst = demand_stats(60, 100, 8)  # 8 cores for 60 rows/s: DS2 at 60 % needs 1
    one = OperatorOptions(scale_in_to="one")
    ds2 = OperatorOptions(scale_in_to="ds2")
    [r1], _ = run(policy, after_burst, opt=one)
    [r2], _ = run(policy, after_burst, opt=ds2)
    assert (r1.action, r1.target_cores) == (SCALE_IN, 7)
    assert (r2.action, r2.target_cores) == (SCALE_IN, 1)
    assert r2.gain > r1.gain


def test_threshold3_gives_back_a_surplus_its_score_alone_would_keep():
    # 4 cores at 180 rows/s: 45 % load, a score of about 35, between δ1 and the alarming level
    s = demand_stats(180, 100, 4, host_mem=0.3)
    assert run("threshold3", s)[0] == []
    [r], _ = run("threshold3", s, opt=OperatorOptions(scale_in_to="ds2"))
    assert r.action == SCALE_IN and r.target_cores == 3  # n* at the 60 % margin
    busy = demand_stats(210, 100, 4, host_mem=0.3)  # n* at 60 % is 4: nothing to give back
    assert run("threshold3", busy, opt=OperatorOptions(scale_in_to="ds2"))[0] == []


def test_scale_in_to_is_validated():
    with pytest.raises(ValueError, match="scale_in_to"):
        OperatorOptions.from_params({"scale_in_to": "all"})


def _sized(action: str, cores: int, target: int, gain: float, stage: str = "s1") -> Request:
    return Request(stage, action, target, None, gain, 10_000.0, "test", {"cores": cores}, app="app")


def test_holding_cores_declines_a_scale_out_that_gains_less_than_its_cores_cost():
    big = _sized(SCALE_OUT, 2, 8, 0.3)  # 6 cores held 15 h until tomorrow's 03:00 window
    free, _ = app_cycle([big])
    assert [d.outcome for d in free] == ["granted"]
    costly, _ = app_cycle([big], core_hour_cost=0.01)
    assert [d.outcome for d in costly] == ["declined"] and "next window" in costly[0].reason
    # urgent: the SLO first
    urgent, _ = app_cycle([big], core_hour_cost=0.01, response=500.0, growing=True)
    assert [d.outcome for d in urgent] == ["granted"]


def test_holding_cores_ranks_scale_ins_by_the_cores_they_give_back():
    small, large = _sized(SCALE_IN, 4, 3, 0.05, "a"), _sized(SCALE_IN, 8, 2, 0.05, "b")
    budget_one = AppView("app", 200.0, "0 3 * * *", 30, 1)
    [d1, d2], _ = app_cycle([small, large], now=IN_WINDOW, app=budget_one, core_hour_cost=0.01)
    granted = [d.request.stage_id for d in (d1, d2) if d.outcome == "granted"]
    assert granted == ["b"]
    # without a holding cost, equal gains keep the request order
    [e1, e2], _ = app_cycle([small, large], now=IN_WINDOW, app=budget_one)
    assert [d.request.stage_id for d in (e1, e2) if d.outcome == "granted"] == ["a"]

