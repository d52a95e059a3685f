"""Predictive input (docs/policies.md §4.1): the input-rate forecaster (analyze.forecast), its use
by the Operator Manager (plan.operator with `forecast`) and the `predictive` configuration in
the simulator. Pure: no database, no Spark (the control wiring is in test_forecast_control.py).
"""

from __future__ import annotations

import random
import warnings
from dataclasses import replace

import numpy as np
import pytest

from streamops.analyze import forecast as fc
from streamops.analyze.forecast import HOLT, HW_ADD, HW_MUL, MIN_BUCKETS, Forecaster, bucket_means, forecast_input
from streamops.analyze.stats import StageStats
from streamops.plan.cost import CostModel
from streamops.plan.model import PRESTAGE, SCALE_IN, SCALE_OUT, OperatorState
from streamops.plan.operator import OperatorContext, operator_cycle
from streamops.plan.options import OperatorOptions
from streamops.sim import POLICY_CONFIGS, run_simulation

SEASON = 120  # buckets: the simulator's compressed day (7200 s) in 60 s buckets
B = 60.0
POLICIES = ("edf", "threshold3", "ds2")


@pytest.fixture(scope="module", autouse=True)
def test_env():
    """Overrides conftest's session fixture of the same name: nothing here needs a database."""
    yield {}


def diurnal(n: int, *, base: float = 30.0, peak: float = 300.0, noise: float = 0.05, seed: int = 1) -> np.ndarray:
    """`n` 60 s buckets of a noisy diurnal rate (night at bucket 0, peak half a season later),
    each the mean of 60 per-second values with `noise` relative noise, as the simulator draws them."""
    t = np.arange(n * 60)
    rate = (base + peak) / 2 - (peak - base) / 2 * np.cos(2 * np.pi * t / (SEASON * 60))
    return bucket_means(rate * (1 + np.random.default_rng(seed).normal(0, noise, len(t))), 60)


# --------------------------------------------------------------------------------------------
# the forecaster


@pytest.mark.parametrize("seasonal, model", [("add", HW_ADD), ("mul", HW_MUL)])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_holt_winters_forecasts_the_next_peak_within_15_percent(seasonal, model, seed):
    # the peak is at 2.5 seasons; history ends 20 buckets before it
    y = diurnal(5 * SEASON // 2 + SEASON // 2, seed=seed)
    history, future = y[:-SEASON // 2 - 20], y[-SEASON // 2 - 20:]
    f = forecast_input(history, bucket_s=B, season_s=SEASON * B, horizon_s=40 * B, seasonal=seasonal)
    assert f.model == model and f.fitted
    true_peak = future[:41].max()
    assert f.peak == pytest.approx(true_peak, rel=0.15)
    assert len(f.path) == 41 and f.peak == max(f.path)


def test_holt_with_less_than_two_seasons_and_none_with_too_little_history():
    y = diurnal(2 * SEASON - 1)
    assert forecast_input(y[:MIN_BUCKETS - 1], bucket_s=B, season_s=SEASON * B, horizon_s=600) is None
    assert forecast_input(np.full(50, np.nan), bucket_s=B, season_s=SEASON * B, horizon_s=600) is None
    assert forecast_input(y, bucket_s=B, season_s=SEASON * B, horizon_s=600).model == HOLT
    rising = forecast_input(y[20:45], bucket_s=B, season_s=SEASON * B, horizon_s=600)  # the morning ramp
    assert rising.peak > y[44]  # the trend carries it ahead of the last bucket


def test_constant_zeros_outages_nans_and_negatives():
    flat = forecast_input(np.full(30, 42.0), bucket_s=B, season_s=SEASON * B, horizon_s=600)
    assert flat.model == fc.FLAT and flat.peak == 42.0 and set(flat.path) == {42.0}
    assert forecast_input(np.zeros(30), bucket_s=B, season_s=SEASON * B, horizon_s=600).peak == 0.0
    y = diurnal(3 * SEASON)
    outage = y.copy()
    outage[200:215] = 0.0  # upstream down for 15 minutes
    f = forecast_input(outage, bucket_s=B, season_s=SEASON * B, horizon_s=600, seasonal="mul")
    assert f.model == HW_ADD  # zeros: additive whatever was asked
    assert np.isfinite(f.peak) and min(f.path) >= 0
    gaps = y.copy()
    gaps[:5] = np.nan  # before the stage existed
    gaps[100:110] = np.nan  # no metrics: the stage was down
    gaps[-2:] = np.nan  # the newest buckets not in yet
    g = forecast_input(gaps, bucket_s=B, season_s=SEASON * B, horizon_s=600)
    assert g.n == len(y) - 5 and np.isfinite(g.peak)
    falling = forecast_input(np.linspace(100, -50, 30), bucket_s=B, season_s=0, horizon_s=1800)
    assert min(falling.path) == 0.0  # clamped, and negative input clipped
    with pytest.raises(ValueError):
        forecast_input(y, bucket_s=0, season_s=SEASON * B, horizon_s=600)


def test_no_warning_escapes():
    rng = np.random.default_rng(5)
    series = [np.r_[np.zeros(20), rng.exponential(5, 30)], np.r_[np.ones(12), [1e6]], rng.normal(0, 1, 15),
              diurnal(2 * SEASON + 3, noise=0.5)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for y in series:
            forecast_input(y, bucket_s=B, season_s=SEASON * B, horizon_s=600)
    assert not [w for w in caught if "statsmodels" in (w.filename or "") or "ConvergenceWarning" in str(w.category)]


@pytest.mark.parametrize("seasonal", [None, "add", "mul"])
def test_advancing_the_fitted_model_is_statsmodels_recursion(seasonal):
    """Between fits the model's states advance bucket by bucket: the same numbers as statsmodels
    refitting the longer series with the same parameters and initial states."""
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    y = diurnal(3 * SEASON, seed=4)
    n = 2 * SEASON + 10 if seasonal else 90
    season_s = SEASON * B if seasonal else 0.0
    first = forecast_input(y[:n], bucket_s=B, season_s=season_s, horizon_s=600, seasonal=seasonal or "add")
    later = forecast_input(y[:n + 5], bucket_s=B, season_s=season_s, horizon_s=600, prior=first,
                           seasonal=seasonal or "add")
    assert first.fitted and not later.fitted and later.params == first.params
    kw = dict(trend="add", damped_trend=True, seasonal=seasonal, seasonal_periods=SEASON if seasonal else None)
    fitted = ExponentialSmoothing(y[:n], initialization_method="heuristic", **kw).fit(use_brute=not seasonal)
    p = fitted.params
    init = {"initial_level": p["initial_level"], "initial_trend": p["initial_trend"]}
    if seasonal:
        init["initial_seasonal"] = p["initial_seasons"]
    smooth = {"smoothing_level": p["smoothing_level"], "smoothing_trend": p["smoothing_trend"],
              "damping_trend": p["damping_trend"],
              **({"smoothing_seasonal": p["smoothing_seasonal"]} if seasonal else {})}
    refit = ExponentialSmoothing(y[:n + 5], initialization_method="known", **init, **kw).fit(optimized=False, **smooth)
    assert np.allclose(later.path, np.maximum(refit.forecast(len(later.path)), 0), rtol=1e-9, atol=1e-9)


def test_fits_only_when_due():
    y = diurnal(2 * SEASON - 1)
    f = Forecaster()
    fitted = []
    for n in range(MIN_BUCKETS, len(y) + 1):
        for _ in range(2):  # called every 30 s, a bucket every 60 s: the second call is cached
            out = f.forecast("s", y[:n], bucket_s=B, season_s=SEASON * B, horizon_s=600, refit_s=1800)
            fitted.append(out.fitted)
    n_fits = sum(fitted)
    assert fitted[0] and not fitted[1]
    assert 4 <= n_fits <= 12, n_fits  # 10, 20, 40, 70, then every 30 buckets


# --------------------------------------------------------------------------------------------
# the Operator Manager with `forecast`

FORECAST = OperatorOptions(forecast=True)


def stats(input_rate: float, cores: int = 2, rate_per_core: float = 100.0, forecast_rate: float | None = None,
          **kw) -> StageStats:
    """A full window of a stage processing `input_rate` at `rate_per_core` rows per busy core-second."""
    span = 120.0
    rows = input_rate * span
    return StageStats("s1", "app", "p0", cores, 1, 8, 4, span, 60, int(rows), rows / (rate_per_core * cores) * 1000.0,
                      0.0, 0.0, 100.0, state_bytes=1e6, host_mem=0.3, forecast_rate=forecast_rate, **kw)


def ctx() -> OperatorContext:
    return OperatorContext(r_max_ms=200.0, cost=CostModel(), pools={}, rng=random.Random(0))


def cycle(policy, s, opt=FORECAST, state=OperatorState()):
    return operator_cycle(policy, s, opt, state, ctx())


@pytest.mark.parametrize("policy", POLICIES)
def test_forecast_asks_before_the_measured_load_would(policy):
    now = stats(110.0)  # 55 % of 2 cores: nothing to do on what is measured
    assert cycle(policy, now)[0] == []
    # a forecast below the measured rate changes nothing
    assert cycle(policy, replace(now, forecast_rate=100.0))[0] == []
    ahead = replace(now, forecast_rate=190.0)  # the peak within the horizon: 95 % of 2 cores
    reqs, state = cycle(policy, ahead)
    assert [r.action for r in reqs] in ([SCALE_OUT], [PRESTAGE])
    if policy != "edf":  # sized by DS2 for the forecast peak: 190 / (100 × 0.7) → 3 cores
        assert reqs[0].target_cores == 3
    assert reqs[0].snapshot["forecast_rate"] == 190.0 and reqs[0].snapshot["input_rate"] == 110.0
    assert reqs[0].snapshot["S"] == pytest.approx(0.55)  # S stays measured
    assert cycle(policy, ahead, OperatorOptions())[0] == []  # forecast off: the forecast is ignored


def test_threshold3_prestages_at_the_alarming_level_ahead_of_the_peak():
    """The morning ramp: the measured load is below the alarming level, the forecast within the
    horizon above it and below scale-out: pre-stage now, so that the scale-out finds a staged copy."""
    s = stats(100.0, forecast_rate=180.0)  # O 41.9 measured, 68.3 at the forecast
    reqs, state = cycle("threshold3", s)
    assert [r.action for r in reqs] == [PRESTAGE] and state.prestaged
    assert cycle("threshold3", replace(s, forecast_rate=None))[0] == []


@pytest.mark.parametrize("policy", POLICIES)
def test_scale_in_is_held_when_the_forecast_needs_the_cores(policy):
    idle = stats(60.0, cores=4)  # 15 % of 4 cores: every policy gives cores back
    assert [r.action for r in cycle(policy, idle)[0]] == [SCALE_IN]
    assert cycle(policy, replace(idle, forecast_rate=260.0))[0] == []  # 260 rows/s need 4 cores at 70 %
    # a forecast that 3 cores can take still lets one go
    assert [r.action for r in cycle(policy, replace(idle, forecast_rate=80.0))[0]] == [SCALE_IN]


@pytest.mark.parametrize("policy", POLICIES)
def test_forecast_off_is_todays_behaviour(policy):
    rng = random.Random(7)
    for _ in range(300):
        s = stats(rng.uniform(0, 400), cores=rng.randint(1, 8), rate_per_core=rng.uniform(20, 200))
        s = replace(s, backlog_rows=rng.choice([0.0, rng.uniform(0, 5000)]), host_cpu=rng.choice([None, rng.random()]))
        state = OperatorState(prestaged=rng.random() < 0.5)
        today = cycle(policy, s, OperatorOptions(), state)
        # a forecast in the window changes nothing with forecast=False, nor forecast=True without one
        with_rate = cycle(policy, replace(s, forecast_rate=rng.uniform(0, 800)), OperatorOptions(), state)
        no_rate = cycle(policy, s, FORECAST, state)
        for other in (with_rate, no_rate):
            assert other[1] == today[1]
            assert [(r.action, r.target_cores, r.target_pool, r.gain, r.reason) for r in other[0]] == \
                [(r.action, r.target_cores, r.target_pool, r.gain, r.reason) for r in today[0]]
        assert [{k: v for k, v in r.snapshot.items() if k != "forecast_rate"} for r in with_rate[0]] == \
            [r.snapshot for r in today[0]]


def test_options():
    assert OperatorOptions().forecast is False
    o = OperatorOptions.from_params({"forecast": "true", "forecast_season_s": 7200})
    assert o.forecast and o.forecast_season_s == 7200.0 and o.forecast_horizon_s == 600.0 \
        and o.forecast_bucket_s == 60.0
    with pytest.raises(ValueError):
        OperatorOptions(forecast_bucket_s=0)


# --------------------------------------------------------------------------------------------
# the simulator: `predictive` against `threshold3_tuned` (its base) on the diurnal trace


@pytest.fixture(scope="module")
def diurnal_runs():
    return {p: run_simulation(p, "diurnal", seed=1, plot=False) for p in ("threshold3_tuned", "predictive")}


def test_predictive_is_threshold3_tuned_plus_the_forecast():
    rec, pred = POLICY_CONFIGS["threshold3_tuned"], POLICY_CONFIGS["predictive"]
    assert pred.operator == rec.operator and pred.app_options == rec.app_options
    assert pred.operator_options == {**rec.operator_options, "forecast": True, "forecast_season_s": 7200.0}


def test_predictive_has_fewer_seconds_above_r_max_on_diurnal(diurnal_runs):
    rec, pred = diurnal_runs["threshold3_tuned"], diurnal_runs["predictive"]
    # seed 1 measured: 110 s against 167 s (seeds 2, 3: 128 / 223, 139 / 192)
    assert pred["seconds_above_rmax"] < rec["seconds_above_rmax"]
    assert pred["availability"] >= rec["availability"] - 0.001


def test_predictive_costs_at_most_ten_percent_more_core_hours_on_diurnal(diurnal_runs):
    # Was a strict xfail (1.17×). Met since issue 46 for a plain reason: with the 1 h scale-down delay
    # neither configuration scales in on this compressed day (seed 1: 37.7 against 36.9 core-hours).
    rec, pred = diurnal_runs["threshold3_tuned"], diurnal_runs["predictive"]
    assert pred["core_hours"] <= 1.1 * rec["core_hours"]


def test_simulator_fits_each_stage_rarely(monkeypatch):
    fits = []
    real = fc._fit
    monkeypatch.setattr(fc, "_fit", lambda *a: fits.append(a[1]) or real(*a))
    run_simulation("predictive", "diurnal", seed=2, plot=False, duration_s=7200)
    assert 0 < len(fits) <= 3 * 8, fits  # per stage: 10, 20, 40, 70 buckets, then every 30
