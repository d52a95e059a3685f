"""A season learned from the data, never assumed (issue 46, item 1): analyze.season's period test
and forecast skill, and mpc planning without a forecast that does worse than the naive one."""

from __future__ import annotations

import numpy as np
import pytest

from streamops.analyze.season import SkillTracker, detect_season
from streamops.analyze.stats import StageStats
from streamops.plan.model import OperatorState
from streamops.plan.operator import OperatorContext, operator_cycle
from streamops.plan.options import OperatorOptions

B = 60.0  # bucket, s


def diurnal(n: int, period_b: int, noise: float = 0.05, seed: int = 0, trend: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    y = 100 + 80 * np.sin(2 * np.pi * t / period_b) + trend * t
    return y * (1 + rng.normal(0, noise, n))


def test_a_declared_season_seen_twice_is_confirmed():
    y = diurnal(250, 120)  # two 7200 s days and a bit
    assert detect_season(y, B, (7200.0,)) == pytest.approx(7200.0, abs=2 * B)


def test_a_season_seen_once_is_not_used():
    assert detect_season(diurnal(200, 120), B, (7200.0,)) == 0.0  # 1.7 periods


def test_a_wrong_candidate_is_refused():
    # the day is 6 h (360 buckets) and 7200 s is declared: lag 120 is a third of a day, anti-correlated
    y = diurnal(800, 360)
    assert detect_season(y, B, (7200.0,)) == 0.0
    assert detect_season(y, B, (21600.0,)) == pytest.approx(21600.0, abs=2 * B)
    # of several candidates, the one the data shows
    assert detect_season(y, B, (7200.0, 21600.0)) == pytest.approx(21600.0, abs=2 * B)


def test_noise_and_a_trend_alone_show_no_season():
    rng = np.random.default_rng(3)
    assert detect_season(100 + rng.normal(0, 10, 400), B, (7200.0,)) == 0.0
    assert detect_season(np.linspace(10, 300, 400) + rng.normal(0, 5, 400), B, (7200.0,)) == 0.0
    # a trend on top of a real season does not hide it
    assert detect_season(diurnal(400, 120, trend=0.5), B, (7200.0,)) == pytest.approx(7200.0, abs=2 * B)


def test_no_candidate_no_season():
    assert detect_season(diurnal(400, 120), B, ()) == 0.0
    assert detect_season(diurnal(400, 120), B, (0.0,)) == 0.0


def test_skill_compares_the_forecast_with_the_naive_one_over_the_recent_past():
    sk = SkillTracker(window=5)
    y = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0]
    # a forecast that knows the ramp beats holding the last value
    for i in range(1, len(y)):
        sk.record("good", i, (y[i] if i < len(y) else 0.0,))  # from bucket i on
    for i in range(1, len(y)):
        sk.record("bad", i, (0.0,))
    assert sk.skill("good", y) == pytest.approx(0.0)
    assert sk.skill("bad", y) > 1.0
    assert sk.skill("never", y) is None
    # too few matured forecasts: no verdict
    sk2 = SkillTracker(window=5, min_forecasts=3)
    sk2.record("k", 7, (1.0,))
    assert sk2.skill("k", y) is None


def _stats(**kw) -> StageStats:
    base = dict(stage_id="s1", app="app", pool="p0", cores=4, min_cores=1, max_cores=12, state_partitions=4,
                span_s=120.0, batches=60, input_rows=12_000, busy_ms=0.5 * 120_000, backlog_rows=0.0,
                backlog_growth_rps=0.0, latency_p95_ms=100.0, state_bytes=1e6)
    base.update(kw)
    return StageStats(**base)


def _ctx() -> OperatorContext:
    return OperatorContext(r_max_ms=1000.0, cost=lambda *a: 10_000.0)


def test_mpc_plans_without_a_forecast_worse_than_the_naive_one_and_says_so():
    opt = OperatorOptions(forecast=True)
    crowd = tuple([800.0] * 11)  # a flash crowd that is not coming
    bad = _stats(forecast_rate=800.0, forecast_path=crowd, forecast_sd=5.0, forecast_skill=2.5)
    reqs, _ = operator_cycle("mpc", bad, opt, OperatorState(), _ctx())
    assert not any(r.action in ("scale_out", "prestage") for r in reqs)
    # the same forecast with skill: mpc acts on it
    good = _stats(forecast_rate=800.0, forecast_path=crowd, forecast_sd=5.0, forecast_skill=0.5)
    reqs_good, _ = operator_cycle("mpc", good, opt, OperatorState(), _ctx())
    assert any(r.action in ("scale_out", "prestage") for r in reqs_good)
    # a reason says why the forecast was set aside, on whatever mpc asks
    low = _stats(cores=12, input_rows=1200, busy_ms=0.05 * 120_000, forecast_rate=800.0, forecast_path=crowd,
                 forecast_sd=5.0, forecast_skill=2.5)
    reqs_low, _ = operator_cycle("mpc", low, opt, OperatorState(), _ctx())
    assert reqs_low and all("forecast set aside" in r.reason for r in reqs_low)


def _sim_with_arrivals(rates: np.ndarray, **opts):
    from streamops.plan.options import AppOptions
    from streamops.sim.engine import Simulation
    from streamops.sim.model import SimConfig
    from streamops.sim.trace_loader import load_trace

    sim = Simulation(SimConfig(), "mpc", OperatorOptions(forecast=True, forecast_season_s=7200.0, **opts),
                     AppOptions(), load_trace("diurnal"), len(rates), seed=1)
    sim.stages[0].arrivals[:] = rates
    return sim


def test_the_simulator_forecasts_with_the_season_its_history_shows():
    t = np.arange(16 * 3600)
    six_hours = 150 + 120 * np.sin(2 * np.pi * t / 21600)  # a 6 h day; 7200 s declared
    two_hours = 150 + 120 * np.sin(2 * np.pi * t / 7200)
    assert _sim_with_arrivals(six_hours)._forecast(_sim_with_arrivals(six_hours).stages[0], len(t)) \
        ["forecast_season_s"] == 0.0
    sim = _sim_with_arrivals(two_hours)
    assert sim._forecast(sim.stages[0], len(t))["forecast_season_s"] == pytest.approx(7200.0, abs=120)
    # assumed, as before issue 46
    sim = _sim_with_arrivals(six_hours, forecast_season_learn=False)
    assert sim._forecast(sim.stages[0], len(t))["forecast_season_s"] == 7200.0


def test_the_simulator_scores_each_forecast_against_the_naive_one():
    t = np.arange(4 * 3600)
    sim = _sim_with_arrivals(150 + 120 * np.sin(2 * np.pi * t / 7200))
    st = sim.stages[0]
    skills = [sim._forecast(st, s)["forecast_skill"] for s in range(1200, len(t), 60)]
    assert skills[0] is None and skills[-1] is not None and skills[-1] < 1.0  # a smooth day: Holt beats holding
