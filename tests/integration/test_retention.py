"""Retention of the run ledger (issue 44 item 12): heartbeats, deployments and failures no longer
grow for ever, and nothing a live row, a report or a counter needs goes."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from streamops.report import retention
from streamops.store import db

pytestmark = pytest.mark.db


def _run(conn, stage: str, status: str, started: str, stopped: str | None) -> int:
    """A deployment started and stopped that long ago (intervals), e.g. '50 days'."""
    return conn.execute(text(
        "INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, status, "
        "started_at, stopped_at) VALUES (:s, 'p', 1, 2, '{}', 'local', '/ck/' || :s, :st, "
        "now() - CAST(:a AS interval), now() - CAST(:b AS interval)) RETURNING id"),
        {"s": stage, "st": status, "a": started, "b": stopped}).scalar_one()


def _failure(conn, dep: int | None, status: str, failed: str, recovered: str | None, gap_ms: float | None = None,
             kind: str = "dead_pid") -> int:
    return conn.execute(text(
        "INSERT INTO failures (stage_id, app, deployment_id, kind, detail, failed_at, status, recovered_at, "
        "closed_at, downtime_ms) VALUES ('a.s', 'a', :d, :k, 'x', now() - CAST(:f AS interval), :st, "
        "now() - CAST(:r AS interval), CASE WHEN :st <> 'recovering' THEN now() - CAST(:f AS interval) END, :g) "
        "RETURNING id"), {"d": dep, "k": kind, "st": status, "f": failed, "r": recovered, "g": gap_ms}).scalar_one()


def _ids(conn, table: str) -> set[int]:
    col = "deployment_id" if table == "heartbeats" else "id"
    return set(conn.execute(text(f"SELECT {col} FROM {table}")).scalars())


def _counters(conn) -> tuple[list, list]:
    failures = [tuple(r) for r in conn.execute(db.query("metrics_failures"))]
    gaps = [tuple(r) for r in conn.execute(db.query("metrics_output_gaps"), {"bounds": [1.0, 2.0, 5.0, 10.0]})]
    return failures, gaps


def test_old_runs_heartbeats_and_failures_go_and_what_is_referenced_or_recent_stays(clean_db):
    with clean_db.begin() as conn:
        conn.execute(text("INSERT INTO pools (name, master, cores) VALUES ('p', 'local', 8)"))
        conn.execute(text("INSERT INTO apps (name, r_max_ms, maintenance_window, spec) VALUES ('a', 1000, '{}', '{}')"))
        for s in ("s", "t"):
            conn.execute(text("INSERT INTO stages (stage_id, app, name, job, pool, cores, min_cores, max_cores, "
                              "state_partitions, trigger_ms, spec) VALUES (:id, 'a', :s, 'wc', 'p', 1, 1, 4, 2, "
                              "1000, '{}')"), {"id": f"a.{s}", "s": s})
        old = _run(conn, "a.s", "stopped", "50 days", "40 days")
        old_failed = _run(conn, "a.s", "failed", "45 days", "40 days")  # its failure closed 40 days ago: both go
        in_change = _run(conn, "a.s", "stopped", "45 days", "40 days")  # a pending change's old run
        in_open_failure = _run(conn, "a.s", "failed", "45 days", "40 days")
        recent = _run(conn, "a.s", "stopped", "3 days", "2 days")
        ended_lately = _run(conn, "a.s", "stopped", "3 hours", "2 hours")
        live = _run(conn, "a.s", "running", "1 hour", None)
        last_of_t = _run(conn, "a.t", "stopped", "50 days", "40 days")  # a stopped stage's last run: its restart
        conn.execute(text("UPDATE deployments SET stopped_at = NULL WHERE id = :i"), {"i": live})
        for dep in (old, recent, ended_lately, live):
            conn.execute(text("INSERT INTO heartbeats (deployment_id, stage_id, beat_at, query_active) "
                              "VALUES (:d, 'a.s', now(), true)"), {"d": dep})
        conn.execute(text("INSERT INTO reconfigurations (stage_id, app, action, status, requested_by, "
                          "old_deployment_id) "
                          "VALUES ('a.s', 'a', 'scale_out', 'pending', 'test', :d)"), {"d": in_change})
        gone_failure = _failure(conn, old_failed, "recovered", "41 days", "40 days", gap_ms=1500.0)
        kept = {_failure(conn, recent, "recovered", "6 days", "5 days", gap_ms=8000.0),
                _failure(conn, in_open_failure, "recovering", "41 days", None),
                _failure(conn, None, "gave_up", "41 days", None, kind="query_failed")}  # down until now
        counters = _counters(conn)

    res = retention.apply_retention(keep_days=30, records_keep_days=90, engine=clean_db)

    assert res.deleted["failures"] == 1 and res.deleted["deployments"] == 2, res.deleted
    with clean_db.begin() as conn:
        assert _ids(conn, "failures") == kept and gone_failure not in _ids(conn, "failures")
        assert _ids(conn, "deployments") == {in_change, in_open_failure, recent, ended_lately, live, last_of_t}
        assert _ids(conn, "heartbeats") == {ended_lately, live}, "a beat of a run ended over a day ago goes"
        # Prometheus's counters never fall: what retention deleted is tallied
        assert _counters(conn) == counters
    again = retention.apply_retention(keep_days=30, records_keep_days=90, engine=clean_db)
    assert again.deleted["failures"] == again.deleted["deployments"] == again.deleted["heartbeats"] == 0
