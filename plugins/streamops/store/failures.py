"""Failures and stage health: the watchdog's reads and writes. SQL is in sql/queries/."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from sqlalchemy import Row

from streamops.store import db


def watchdog_candidates() -> list[Row[Any]]:
    """Each stage's latest primary run, with its pool's master, health and silence (seconds)."""
    return db.rows("watchdog_candidates")


def heartbeat_silence(deployment_id: int) -> Row[Any] | None:
    """(silent_s, server_up_s) of one run, read now."""
    return db.row("heartbeat_silence", deployment_id=deployment_id)


def beat_write_s(limit_s: float) -> float:
    """Seconds a driver's heartbeat write takes now, measured by writing as a beat does (its lock on
    `heartbeats`, a commit record in the WAL, no wait for the flush) without a row. A lock held (a
    migration) or a stalled WAL holds every beat back while reads still answer at once. Raises
    (OperationalError) when the lock or the statement takes longer than `limit_s`."""
    started = time.monotonic()
    with db.transaction(durable=False) as conn:
        conn.execute(db.query("heartbeat_write_probe_limits"), {"ms": str(max(1, round(limit_s * 1000)))})
        conn.execute(db.query("heartbeat_write_probe"))
    return time.monotonic() - started


def withdraw(failure_id: int) -> bool:
    """Delete a failure just recorded that was none (open, nothing restarted); whether it was."""
    with db.transaction() as conn:
        return conn.execute(db.query("failure_withdraw"), {"id": failure_id}).rowcount == 1


def open_failure(stage_id: str, app: str, deployment_id: int, kind: str, detail: str,
                 failed_at: datetime, role: str = "primary", detected_by: str = "watchdog") -> tuple[int, int, bool]:
    """The open failure of the stage's `role`, created now if it has none: (id, restarts
    attempted, created). A new one is `injected` when the fault injector hit that run just before.
    An open output gap is taken over by any other kind: that is its cause, found."""
    with db.transaction() as conn:
        # An open failure whose restart has committed since is over: closed at that commit, so that
        # a new fault of the restarted run is a failure of its own, not merged into the old one.
        conn.execute(db.query("failures_close_late"))
        row = conn.execute(db.query("failure_open"), {"stage_id": stage_id, "role": role}).first()
        if row:
            if row.kind == "output_gap" and kind != "output_gap":  # the gap's cause, found: it takes it over
                conn.execute(db.query("failure_take_over"), {"id": row.id, "kind": kind, "failed_at": failed_at,
                                                             "detected_by": detected_by, "detail": detail[:2000]})
            return row.id, row.attempts, False
        last_commit = conn.execute(db.query("last_commit_before"), {"stage_id": stage_id, "ts": failed_at}).scalar()
        fid = conn.execute(db.query("failure_insert"), {
            "stage_id": stage_id, "app": app, "deployment_id": deployment_id, "kind": kind, "detail": detail[:2000],
            "failed_at": failed_at, "last_commit_at": last_commit, "role": role,
            "detected_by": detected_by}).scalar_one()
    return fid, 0, True


def record_outage_gaps(since: datetime, until: datetime, detail: str, floor_s: float,
                       detected_by: str) -> list[Row[Any]]:
    """Output gaps across a database outage from `since` to `until` (failures_record_outage.sql):
    (id, stage_id) of each created."""
    with db.transaction() as conn:
        return list(conn.execute(db.query("failures_record_outage"), {
            "since": since, "until": until, "detail": detail[:2000], "floor_s": floor_s,
            "detected_by": detected_by}).all())


def note(failure_id: int, text: str) -> None:
    """Add to the failure's detail what its recovery did (a checkpoint repaired)."""
    db.write("failure_note", id=failure_id, note=text)


def count_attempt(failure_id: int) -> None:
    db.write("failure_attempt", id=failure_id)


def recovered(failure_id: int, at: datetime | None, deployment_id: int | None) -> Row[Any] | None:
    """Close the failure at the first output `at` of run `deployment_id` (None: the stage's first
    commit after the failure, no run of its own): its (mttr_ms, downtime_ms); None when it was not
    recovering."""
    return db.write("failure_recovered", id=failure_id, at=at, deployment_id=deployment_id)


def close_late() -> list[Row[Any]]:
    """Close the failures whose replica's newer run has committed since (a slow restart):
    (id, stage_id, role, mttr_ms) of each."""
    with db.transaction() as conn:
        return list(conn.execute(db.query("failures_close_late")).all())


def close_healed() -> list[Row[Any]]:
    """Close the embedded cluster's failures (a master or worker restarted under a living run) at
    the stage's first commit after the heal: (id, stage_id, role, kind, mttr_ms) of each."""
    with db.transaction() as conn:
        return list(conn.execute(db.query("failures_close_healed")).all())


def close_given_up() -> list[Row[Any]]:
    """End the given-up failures' downtime at the first commit of a later run of their stage (they
    stay `gave_up`): (id, stage_id, role, downtime_ms) of each."""
    with db.transaction() as conn:
        return list(conn.execute(db.query("failures_close_given_up")).all())


def give_up(failure_id: int, reason: str) -> None:
    """Close the failure as given up and mark its stage `failed`."""
    db.write("failure_give_up", id=failure_id, reason=reason[:2000])


def stages_health() -> list[Row[Any]]:
    """(stage_id, app, health, health_reason) of every stage."""
    return db.rows("stages_health")


def clear_health(stage_ids: list[str]) -> None:
    db.write("stages_health_clear", stage_ids=stage_ids)
