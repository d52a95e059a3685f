"""A stage's recorded run, as plain rows: what `streamops sim --calibrate` fits the simulator to
(sim/rundata.RunData wraps them; the simulator itself never opens the database)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from streamops.store import db


def _plain(v: Any) -> Any:
    """Decimals and the like from the driver become floats; datetimes stay."""
    if v is None or isinstance(v, (int, float, str, bool, datetime)):
        return v
    try:
        return float(v)
    except (TypeError, ValueError):
        return str(v)


def _rows(name: str, **params: Any) -> list[dict[str, Any]]:
    return [{k: _plain(v) for k, v in r._mapping.items()} for r in db.rows(name, **params)]


def stage_run(stage_id: str, since: datetime | None = None, until: datetime | None = None,
              minutes: float | None = None) -> dict[str, Any]:
    """The stage's batches, reconfigurations, failures and sink commits in [since, until], or the
    `minutes` up to its latest batch (default: every batch it has), and what predicts its restarts
    without their own gaps: the cost history of all its changes and recovered failures (each row's
    id, for a leave-one-out) and its first deployment's start. ValueError when there are no batches."""
    st = db.row("calibration_stage", stage_id=stage_id)
    if st is None:
        raise ValueError(f"unknown stage {stage_id!r}")
    if st.last_ts is None:
        raise ValueError(f"stage {stage_id!r} has no batches in stage_metrics")
    until = until or st.last_ts
    if since is None:
        since = until - timedelta(minutes=minutes) if minutes else st.first_ts
    since = since.replace(microsecond=0)  # whole seconds: the report's 1-second windows (10_sla.sql)
    if since >= until:
        raise ValueError(f"empty time range {since} … {until}")
    kw = dict(stage_id=stage_id, from_ts=since, to_ts=until)
    metrics = _rows("calibration_metrics", **kw)
    if not metrics:
        raise ValueError(f"stage {stage_id!r} has no batches between {since} and {until}")
    # a gap that began before the range still counts in it: commits from a minute earlier
    commits = _rows("calibration_commits", stage_id=stage_id, from_ts=since - timedelta(minutes=1), to_ts=until)
    return dict(stage_id=stage_id, t_from=since, t_to=until, stage={k: _plain(v) for k, v in st._mapping.items()},
                metrics=metrics, reconfigs=_rows("calibration_reconfigurations", **kw), commits=commits,
                failures=_rows("calibration_failures", **kw),
                history=_rows("calibration_cost_history", stage_id=stage_id),
                first_start=next(iter(_rows("calibration_first_start", stage_id=stage_id)), None))
