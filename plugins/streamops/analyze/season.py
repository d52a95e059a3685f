"""A season learned from the data, never assumed (issue 46, item 1). Pure but for SkillTracker's memory.

`detect_season`: a candidate season (production: one day, or what the registry declares) is used
only when the stage's own history shows it: at least `min_cycles` periods of history, and the
detrended series correlates with itself one period later (Pearson r at the best lag within
±`tolerance` of the candidate) by at least max(`min_corr`, 2/√pairs), the latter the 5 % bound of
a white-noise correlation. A 7 200 s season assumed on a 6 h day is a third of a day: r ≈ −0.5,
refused; the forecaster then runs without a season (Holt).

`SkillTracker`: each forecast's error over the buckets that have since been observed, against the
naive forecast made at the same time (the last complete bucket, held). skill = Σ|forecast − y| /
Σ|naive − y| over the forecasts of the recent past: above 1 the forecast does worse than holding
the measured rate, and mpc plans without it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

MIN_CORR = 0.5  # ours: half the variance at one period's lag is explained by the period
TOLERANCE = 0.1  # a measured day drifts; the candidate is searched ±10 %


def _lag_corr(y: np.ndarray, lag: int) -> float:
    a, b = y[:-lag], y[lag:]
    sa, sb = float(a.std()), float(b.std())
    if sa <= 0 or sb <= 0:
        return 0.0
    return float(((a - a.mean()) * (b - b.mean())).mean() / (sa * sb))


def detect_season(history: ArrayLike, bucket_s: float, candidates_s: Sequence[float], *, min_cycles: float = 2.0,
                  min_corr: float = MIN_CORR, tolerance: float = TOLERANCE) -> float:
    """The season (s) among `candidates_s` that the history (one value per bucket, oldest first)
    shows, refined to the best lag; 0.0 when none does."""
    y = np.asarray(history, dtype=float)
    y = y[np.isfinite(y)]
    n = len(y)
    if n < 4 or bucket_s <= 0:
        return 0.0
    x = np.arange(n, dtype=float)
    y = y - np.polyval(np.polyfit(x, y, 1), x)  # a trend correlates with itself at any lag
    best, best_r = 0.0, -math.inf
    for c in candidates_s:
        if c <= 0:
            continue
        lo = max(2, int(math.floor(c * (1 - tolerance) / bucket_s)))
        hi = min(int(n // min_cycles), int(math.ceil(c * (1 + tolerance) / bucket_s)))
        if lo > hi or n < min_cycles * c / bucket_s - 1e-9:  # not yet seen `min_cycles` times
            continue
        lag = max(range(lo, hi + 1), key=lambda k: _lag_corr(y, k))
        r = _lag_corr(y, lag)
        if r >= max(min_corr, 2.0 / math.sqrt(n - lag)) and r > best_r:
            best, best_r = lag * bucket_s, r
    return best


def season_of(history: ArrayLike, opt: Any) -> float:
    """The season the forecaster may use (OperatorOptions `opt`): the declared one, only once the
    history shows it (`forecast_season_learn`), else as declared."""
    if not opt.forecast_season_learn:
        return float(opt.forecast_season_s)
    return detect_season(history, opt.forecast_bucket_s, (opt.forecast_season_s,))


class SkillTracker:
    """Per series: the forecasts of its last `window` buckets (forecast paths by the bucket they
    start at) and their skill against the naive forecast, once `min_forecasts` have matured."""

    def __init__(self, window: int = 30, min_forecasts: int = 5) -> None:
        self.window, self.min_forecasts = window, min_forecasts
        self.paths: dict[str, dict[int, tuple[float, ...]]] = {}

    def record(self, key: str, start: int, path: Sequence[float]) -> None:
        """The forecast made with buckets < `start` known: path[k] is bucket start + k's."""
        kept = self.paths.setdefault(key, {})
        kept[start] = tuple(float(v) for v in path)
        for old in [s for s in kept if s < start - self.window]:
            del kept[old]

    def skill(self, key: str, history: ArrayLike, first: int = 0) -> float | None:
        """Σ forecast error / Σ naive error over the recent forecasts' observed buckets (history[i]
        is bucket first + i); None before `min_forecasts` have an observed bucket."""
        y = np.asarray(history, dtype=float)
        end = first + len(y)
        err = naive = 0.0
        used = 0
        for start, path in self.paths.get(key, {}).items():
            if start < end - self.window or start >= end or start - 1 < first:
                continue
            held = y[start - 1 - first]
            obs = y[start - first:min(end, start + len(path)) - first]
            f = np.asarray(path[:len(obs)])
            ok = np.isfinite(obs)
            if not ok.any() or not math.isfinite(held):
                continue
            err += float(np.abs(f[ok] - obs[ok]).sum())
            naive += float(np.abs(held - obs[ok]).sum())
            used += 1
        if used < self.min_forecasts:
            return None
        return err / naive if naive > 0 else (0.0 if err == 0 else math.inf)
