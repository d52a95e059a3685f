"""Predictive input in the control loop (docs/policies.md §4.1): for the stages whose policy
params set `forecast: true`, the per-bucket input rate from stage_metrics (one set-based query
for all of them, `stage_rate_history.sql`) → `analyze.forecast` → `StageStats.forecast_rate`.
Stages that do not ask pay nothing: no query, no statsmodels import.

History: HISTORY_SEASONS × `forecast_season_s` (at least MIN_HISTORY_BUCKETS buckets), capped at
MAX_HISTORY_S, in complete buckets of `forecast_bucket_s` aligned to the epoch. A process keeps
each stage's buckets and fitted model, so its next cycle reads only the buckets since then
(the last REREAD_BUCKETS again: a batch's metrics land after it ends) and advances the model
instead of refitting it. A stage driver (its Operator Manager every local period) is such a
process; a re-plan task that starts afresh reads the whole history and fits once per stage.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import Connection

from streamops.analyze.forecast import Forecaster, innovation_sd
from streamops.analyze.season import SkillTracker, season_of
from streamops.analyze.stats import StageStats
from streamops.plan.options import OperatorOptions
from streamops.registry import Policy
from streamops.store import db

log = logging.getLogger("streamops.forecast")

HISTORY_SEASONS = 3
MIN_HISTORY_BUCKETS = 120  # without a season (forecast_season_s = 0): two hours of 60 s buckets
MAX_HISTORY_S = 8 * 86400.0
REREAD_BUCKETS = 2


@dataclass
class _History:
    bucket_s: float
    first: int  # bucket index (epoch seconds / bucket_s) of values[0]
    values: np.ndarray  # rows/s per bucket; NaN: no batch in it

    @property
    def end(self) -> int:
        return self.first + len(self.values)


_HISTORY: dict[str, _History] = {}
_FORECASTER = Forecaster()
_SKILL = SkillTracker()  # each stage's recent forecasts, scored against the naive one (in this process only)
_LOCK = threading.Lock()


def _span(opts: OperatorOptions) -> int:
    b = opts.forecast_bucket_s
    return max(MIN_HISTORY_BUCKETS, int(min(HISTORY_SEASONS * opts.forecast_season_s, MAX_HISTORY_S) // b))


def with_forecasts(conn: Connection, now: datetime,
                   windows: list[tuple[StageStats, Policy]]) -> list[tuple[StageStats, Policy]]:
    """`windows` with `forecast_rate`, `forecast_path` and `forecast_sd` set on the stages that ask
    for a forecast."""
    asks = {stats.stage_id: policy.params for stats, policy in windows
            if policy.params.forecast and stats.batches > 0}  # an empty window decides nothing
    if not asks:
        return windows
    with _LOCK:
        forecasts = _forecasts(conn, now.timestamp(), asks)
    return [(replace(s, **forecasts[s.stage_id]) if forecasts.get(s.stage_id) else s, p) for s, p in windows]


def _forecasts(conn: Connection, epoch: float, asks: dict[str, OperatorOptions]) -> dict[str, dict[str, Any]]:
    """Per stage: the StageStats fields of its forecast (none when it has too little history)."""
    plan: dict[str, tuple[float, int, int]] = {}  # stage → (bucket_s, first bucket to read, end bucket)
    for sid, o in asks.items():
        b = o.forecast_bucket_s
        end = math.floor(epoch / b)  # the bucket in progress: not read
        start = end - _span(o)
        h = _HISTORY.get(sid)
        if h is not None and h.bucket_s == b and start < h.end <= end:
            start = max(start, h.end - REREAD_BUCKETS)
        else:
            _HISTORY.pop(sid, None)
        plan[sid] = (b, start, end)
    rows = conn.execute(db.query("stage_rate_history"), {
        "stages": list(plan), "bucket_s": [p[0] for p in plan.values()],
        "since": [p[0] * p[1] for p in plan.values()], "until": [p[0] * p[2] for p in plan.values()],
    }).all()
    fresh: dict[str, dict[int, float]] = {sid: {} for sid in plan}
    for sid, bucket, rate in rows:
        fresh[sid][int(bucket)] = float(rate)
    out: dict[str, dict[str, Any]] = {}
    for sid, (b, start, end) in plan.items():
        h = _merge(_HISTORY.get(sid), b, start, end, fresh[sid], _span(asks[sid]))
        _HISTORY[sid] = h
        o = asks[sid]
        season = season_of(h.values, o)  # the declared season, once the history shows it
        f = _FORECASTER.forecast(sid, h.values, bucket_s=b, season_s=season, horizon_s=o.forecast_horizon_s,
                                 end_s=end * b)
        if f is not None:
            skill = _SKILL.skill(sid, h.values, first=h.first)
            _SKILL.record(sid, end, f.path)
        out[sid] = {} if f is None else {"forecast_rate": f.peak, "forecast_path": f.path,
                                         "forecast_sd": innovation_sd(h.values), "forecast_skill": skill,
                                         "forecast_season_s": season}
        if f is not None and f.fitted:
            log.info("stage %s: forecast model %s fitted on %d buckets: peak %.1f rows/s within %.0f s",
                     sid, f.model, f.n, f.peak, o.forecast_horizon_s)
    return out


def _merge(h: _History | None, bucket_s: float, start: int, end: int, rates: dict[int, float], span: int) -> _History:
    """The kept buckets with [start, end) replaced by what was just read, trimmed to `span`."""
    new = np.full(end - start, np.nan)
    for k, v in rates.items():
        if start <= k < end:
            new[k - start] = v
    if h is None or start <= h.first:
        values, first = new, start
    else:
        values, first = np.concatenate([h.values[:start - h.first], new]), h.first
    if len(values) > span:
        values, first = values[-span:], first + len(values) - span
    return _History(bucket_s, first, values)
