"""Retention and housekeeping in PostgreSQL: drop daily `stage_metrics` partitions older than the
configured days, create them days ahead (draining the default partition of any day a missed
night left there), and delete old rows of every other table that grows with time (the run
ledger's over the metrics' days: the reports read it with them). The nightly
report DAG and `streamops gc` call `apply_retention()`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import date

from sqlalchemy import Engine

from streamops.store import db

DEFAULT_KEEP_DAYS = 30
DEFAULT_RECORDS_KEEP_DAYS = 90


def keep_days_setting() -> int:
    """`STREAMOPS_METRICS_RETENTION_DAYS`, else 30 days."""
    return int(os.environ.get("STREAMOPS_METRICS_RETENTION_DAYS", DEFAULT_KEEP_DAYS))


def records_keep_days_setting() -> int:
    """`STREAMOPS_RECORDS_RETENTION_DAYS` (quarantine, commits, failed batches, faults, commands), else 90 days."""
    return int(os.environ.get("STREAMOPS_RECORDS_RETENTION_DAYS", DEFAULT_RECORDS_KEEP_DAYS))


@dataclass(frozen=True)
class RetentionResult:
    keep_days: int
    today: date
    dropped: list[str] = field(default_factory=list)   # partition names
    deleted_default_rows: int = 0
    created: int = 0                                   # partitions created ahead
    drained: list[str] = field(default_factory=list)   # days moved out of the default partition
    records_keep_days: int | None = None
    deleted: dict[str, int] = field(default_factory=dict)  # table → rows deleted


def apply_retention(keep_days: int | None = None, today: date | None = None, engine: Engine | None = None,
                    records_keep_days: int | None = None, ahead_days: int = 7) -> RetentionResult:
    """One transaction: drop partitions of days before `today - keep_days`, purge the default
    partition before that cutoff and give each later day left in it its partition, ensure the
    partitions of today and `ahead_days` after it, delete rows older than `records_keep_days`
    from the other growing tables, and runs, their failures and heartbeats ended before the
    metrics' cutoff (runs_retention, migration 040)."""
    keep = keep_days_setting() if keep_days is None else keep_days
    keep_records = records_keep_days_setting() if records_keep_days is None else records_keep_days
    with db.transaction(engine) as conn:
        today = today or conn.execute(db.query("today")).scalar_one()
        rows = conn.execute(db.query("metrics_retention"), {"keep_days": keep, "today": today,
                                                            "ahead_days": ahead_days}).all()
        deleted = {r.target: r.deleted
                   for r in conn.execute(db.query("records_retention"), {"keep_days": keep_records,
                                                                         "runs_keep_days": keep})}
    dropped = [r.target for r in rows if r.action == "dropped"]
    deleted_default = sum(int(r.detail.split()[0]) for r in rows if r.action == "deleted")
    created = sum(int(r.detail.split()[0]) for r in rows if r.action in ("ensured", "drained"))
    drained = [r.detail.rsplit(" ", 1)[-1] for r in rows if r.action == "drained"]
    return RetentionResult(keep, today, dropped, deleted_default, created, drained, keep_records, deleted)
