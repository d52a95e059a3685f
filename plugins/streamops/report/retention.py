"""Retention of `stage_metrics`: drop daily partitions older than the configured days and create
today's and tomorrow's ahead of time. The nightly report DAG calls `apply_retention()`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import date

from sqlalchemy import Engine

from streamops.store import db

DEFAULT_KEEP_DAYS = 30


def keep_days_setting() -> int:
    """`STREAMOPS_METRICS_RETENTION_DAYS`, else 30 days."""
    return int(os.environ.get("STREAMOPS_METRICS_RETENTION_DAYS", DEFAULT_KEEP_DAYS))


@dataclass(frozen=True)
class RetentionResult:
    keep_days: int
    today: date
    dropped: list[str] = field(default_factory=list)   # partition names
    deleted_default_rows: int = 0
    created: int = 0                                   # partitions created ahead


def apply_retention(keep_days: int | None = None, today: date | None = None,
                    engine: Engine | None = None) -> RetentionResult:
    """One transaction: drop partitions of days before `today - keep_days`, purge the default
    partition before that cutoff, ensure today's and tomorrow's partitions exist."""
    keep = keep_days_setting() if keep_days is None else keep_days
    with db.transaction(engine) as conn:
        today = today or conn.execute(db.query("today")).scalar_one()
        rows = conn.execute(db.query("metrics_retention"), {"keep_days": keep, "today": today}).all()
    dropped = [r.target for r in rows if r.action == "dropped"]
    deleted = sum(int(r.detail.split()[0]) for r in rows if r.action == "deleted")
    created = sum(int(r.detail.split()[0]) for r in rows if r.action == "ensured")
    return RetentionResult(keep, today, dropped, deleted, created)
