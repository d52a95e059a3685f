"""The input-rate forecaster: a stage's per-bucket input rate (rows/s, one value per
`bucket_s`, oldest first) → the forecast path over the next `horizon_s` and its peak.

Pure (no I/O, no clock): the caller passes the previous `Forecast` back in to reuse its fit.

Model: statsmodels' exponential smoothing (`statsmodels.tsa.holtwinters.ExponentialSmoothing`,
heuristic initialization, smoothing parameters by least squares):
- at least two seasons of history (season = `season_s / bucket_s` buckets): Holt-Winters,
  additive damped trend, additive seasonality (multiplicative on request, when the history is
  strictly positive);
- less than that: Holt, additive damped trend, no season;
- fewer than `MIN_BUCKETS` buckets: no forecast (None).

Cost: statsmodels fits the model (≈ 10 ms for Holt on 240 buckets, ≈ 30 ms for Holt-Winters
with a 120-bucket season, ≈ 50 ms with a 1440-bucket season on 3 days; importing statsmodels
takes 3–4 s, once per process that forecasts) only when the parameters are due: at the first call,
when the model changes (two seasons reached), when the history doubled since the last fit or
`refit_s` of new history came in, or when its newest bucket changed by more than
`LATE_TOLERANCE` (late metrics). In between,
each new bucket advances the fitted model's states (level, trend, season) by one step of the
same smoothing recursion that statsmodels runs (`_step`, checked against it in
tests/unit/test_forecast.py), and the path is the model's forecast from those states: microseconds.
A history that did not gain a bucket returns the previous forecast.

Data: NaN (a bucket without metrics: the stage was down or not yet deployed) is interpolated,
leading NaNs are dropped and trailing ones carry the last value; negative rates are clipped to
0; a constant series forecasts itself without fitting. Zeros (an outage upstream, an idle night)
are data: with zeros in the history the seasonality is additive whatever was asked for. Forecasts
are clamped to ≥ 0.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

MIN_BUCKETS = 10  # statsmodels' heuristic initialization needs 10 observations
LATE_TOLERANCE = 0.1  # the newest bucket the model saw may grow this much (late metrics) without a refit
HOLT = "holt"
HW_ADD = "holt_winters_add"
HW_MUL = "holt_winters_mul"
FLAT = "flat"


@dataclass(frozen=True, eq=False)
class Forecast:
    peak: float  # the highest forecast rate (rows/s) over the horizon, the bucket in progress included
    path: tuple[float, ...]  # the forecast rate of each bucket ahead, from the bucket in progress
    model: str  # holt | holt_winters_add | holt_winters_mul | flat
    end_s: float  # end of the history the forecast was made from (the caller's clock, seconds)
    n: int  # buckets of history used
    last: float  # the newest bucket's rate
    horizon_s: float
    fitted_end_s: float = 0.0  # end of the history statsmodels last fitted the parameters on
    fitted_n: int = 0
    params: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 1.0)  # alpha, beta, gamma, phi
    level: float = 0.0  # the model's states after the newest bucket
    trend: float = 0.0
    season: tuple[float, ...] = ()  # the last season's factors, oldest first
    fitted: bool = False  # statsmodels fitted the parameters in this call (else: advanced or cached)


def bucket_means(x: np.ndarray, bucket_s: float) -> np.ndarray:
    """Per-second values → the mean of each complete bucket of `bucket_s` seconds (oldest first)."""
    b = max(1, int(round(bucket_s)))
    n = len(x) // b
    return np.asarray(x[:n * b], dtype=float).reshape(n, b).mean(axis=1) if n else np.zeros(0)


def clean_history(history: ArrayLike) -> np.ndarray:
    """NaNs interpolated (leading ones dropped, trailing ones carry the last value), negatives → 0."""
    y = np.asarray(history, dtype=float).ravel()
    ok = np.isfinite(y)
    if not ok.any():
        return np.zeros(0)
    y = y[int(np.argmax(ok)):]
    ok = np.isfinite(y)
    if not ok.all():
        idx = np.arange(len(y))
        y = np.interp(idx, idx[ok], y[ok])  # beyond the last finite value: that value
    out: np.ndarray = np.maximum(y, 0.0)
    return out


def _model_kind(y: np.ndarray, season: int, seasonal: str) -> str:
    if season >= 2 and len(y) >= 2 * season:
        return HW_MUL if seasonal == "mul" and float(y.min()) > 0 else HW_ADD
    return HOLT


def _fit(y: np.ndarray, kind: str,
         season: int) -> tuple[tuple[float, float, float, float], float, float, tuple[float, ...]]:
    """statsmodels' fit → (alpha, beta, gamma, phi) and the states after the last observation."""
    from statsmodels.tools.sm_exceptions import ConvergenceWarning, ValueWarning
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    seasonal = {HW_ADD: "add", HW_MUL: "mul"}.get(kind)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        for w in (ConvergenceWarning, ValueWarning, RuntimeWarning, FutureWarning):
            warnings.simplefilter("ignore", w)
        res = ExponentialSmoothing(y, trend="add", damped_trend=True, seasonal=seasonal,
                                   seasonal_periods=season if seasonal else None,
                                   initialization_method="heuristic"
                                   ).fit(use_brute=not seasonal)  # brute: slow with a season
    p = res.params
    gamma = float(p["smoothing_seasonal"]) if seasonal else 0.0
    params = (float(p["smoothing_level"]), float(p["smoothing_trend"]), gamma, float(p["damping_trend"]))
    season_states = tuple(float(v) for v in np.asarray(res.season)[-season:]) if seasonal else ()
    return params, float(np.asarray(res.level)[-1]), float(np.asarray(res.trend)[-1]), season_states


def _step(kind: str, params: tuple[float, float, float, float], level: float, trend: float, season: tuple[float, ...],
          y: float) -> tuple[float, float, tuple[float, ...]]:
    """One observation through the damped-trend smoothing recursion (statsmodels' holtwinters)."""
    alpha, beta, gamma, phi = params
    base = level + phi * trend
    if kind == HW_ADD:
        new_level = alpha * (y - season[0]) + (1 - alpha) * base
        season = season[1:] + (gamma * (y - base) + (1 - gamma) * season[0],)
    elif kind == HW_MUL:
        new_level = alpha * (y / season[0]) + (1 - alpha) * base
        season = season[1:] + (gamma * (y / base) + (1 - gamma) * season[0],)
    else:
        new_level = alpha * y + (1 - alpha) * base
    return new_level, beta * (new_level - level) + (1 - beta) * phi * trend, season


def _path(kind: str, phi: float, level: float, trend: float, season: tuple[float, ...], steps: int) -> np.ndarray:
    damp = np.cumsum(phi ** np.arange(1, steps + 1))
    path = level + damp * trend
    if kind in (HW_ADD, HW_MUL):
        s = np.asarray(season)[np.arange(steps) % len(season)]
        path = path + s if kind == HW_ADD else path * s
    return np.maximum(path, 0.0)


def _advanceable(prior: Forecast | None, kind: str, y: np.ndarray, new: int, refit_s: float, end: float,
                 bucket_s: float) -> bool:
    """Can `prior`'s fitted model take the `new` newest buckets without a new statsmodels fit?"""
    if prior is None or prior.model != kind or new < 0 or len(y) <= new:
        return False
    seen = float(y[-1 - new])
    if abs(seen - prior.last) > LATE_TOLERANCE * max(abs(prior.last), 1e-9):
        return False  # the buckets the model saw changed (late metrics, another series): refit
    since_fit = end - prior.fitted_end_s
    return since_fit < refit_s and since_fit < prior.fitted_n * bucket_s  # refit when the history doubled


def forecast_input(history: ArrayLike, *, bucket_s: float, season_s: float, horizon_s: float,
                   end_s: float | None = None, prior: Forecast | None = None, refit_s: float = 1800.0,
                   seasonal: str = "add") -> Forecast | None:
    """Forecast the input rate over the next `horizon_s` from `history` (rows/s per complete
    bucket of `bucket_s` seconds, oldest first, ending at `end_s`; default: a history that
    started at 0). `prior`, the previous call's result for the same series, is reused: returned
    as is when the history gained no bucket, advanced bucket by bucket until its parameters are
    due (`refit_s`). None with fewer than MIN_BUCKETS buckets or when no model can be fitted."""
    if bucket_s <= 0 or horizon_s < 0:
        raise ValueError("expected bucket_s > 0 and horizon_s >= 0")
    if seasonal not in ("add", "mul"):
        raise ValueError(f"expected seasonal 'add' or 'mul', got {seasonal!r}")
    y = clean_history(history)
    n = len(y)
    if n < MIN_BUCKETS:
        return None
    end = float(end_s) if end_s is not None else n * bucket_s
    last = float(y[-1])
    steps = int(math.ceil(horizon_s / bucket_s)) + 1  # the bucket in progress, then the horizon's
    if float(np.ptp(y)) == 0.0:
        return Forecast(last, (last,) * steps, FLAT, end, n, last, horizon_s, end, n)
    if prior is not None and prior.end_s == end and prior.n == n and prior.last == last \
            and prior.horizon_s == horizon_s:
        return replace(prior, fitted=False)
    season = int(round(season_s / bucket_s)) if season_s > 0 else 0
    kind = _model_kind(y, season, seasonal)
    new = int(round((end - prior.end_s) / bucket_s)) if prior is not None else -1
    if prior is not None and _advanceable(prior, kind, y, new, refit_s, end, bucket_s):
        level, trend, states = prior.level, prior.trend, prior.season
        for v in y[n - new:]:
            level, trend, states = _step(kind, prior.params, level, trend, states, float(v))
        path = _path(kind, prior.params[3], level, trend, states, steps)
        if np.all(np.isfinite(path)):
            return Forecast(float(path.max()), tuple(path.tolist()), kind, end, n, last, horizon_s,
                            prior.fitted_end_s, prior.fitted_n, prior.params, level, trend, states)
    for k in dict.fromkeys((kind, HOLT)):  # a failed seasonal fit falls back to Holt
        try:
            params, level, trend, states = _fit(y, k, season)
        except (ValueError, np.linalg.LinAlgError, ZeroDivisionError, IndexError):
            continue
        path = _path(k, params[3], level, trend, states, steps)
        if np.all(np.isfinite(path)) and all(map(math.isfinite, params)):
            return Forecast(float(path.max()), tuple(path.tolist()), k, end, n, last, horizon_s, end, n,
                            params, level, trend, states, fitted=True)
    return None


class Forecaster:
    """Each series' (stage's) previous forecast, so that the next call reuses its fit. In memory
    only: the simulator keeps one per run, the control process one per process."""

    def __init__(self) -> None:
        self.last: dict[str, Forecast] = {}

    def forecast(self, key: str, history: ArrayLike, **kw: Any) -> Forecast | None:
        """`forecast_input(history, prior=<key's previous forecast>, **kw)`, remembered under `key`."""
        f = forecast_input(history, prior=self.last.get(key), **kw)
        if f is None:
            self.last.pop(key, None)
        else:
            self.last[key] = f
        return f


def innovation_sd(history: ArrayLike, window: int = 30) -> float | None:
    """The forecast's uncertainty per bucket ahead: the standard deviation of the last `window`
    bucket-to-bucket changes of the history (a random walk's innovation; h buckets ahead the
    spread is this × √h). None with fewer than 3 buckets. Simpler than the smoothing model's own
    prediction intervals, which statsmodels gives only by simulation (too slow per cycle)."""
    y = clean_history(history)
    if len(y) < 3:
        return None
    d = np.diff(y[-(window + 1):])
    return float(np.std(d, ddof=1)) if len(d) >= 2 else None
