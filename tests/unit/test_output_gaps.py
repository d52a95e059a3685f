"""Output gaps (execute/gaps.py): the limit, the cause, and when a run is in one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from streamops.execute import gaps

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def _run(**kw) -> SimpleNamespace:
    base = dict(status="running", beat_info={"backlog_files": 2}, trigger_active=False,
                last_commit_at=NOW - timedelta(seconds=30), running_at=NOW - timedelta(hours=1),
                config={"spec": {"trigger_interval_ms": 2000}})
    return SimpleNamespace(**{**base, **kw})


def test_the_limit_is_three_triggers_and_never_under_the_floor():
    assert gaps.limit_s(1000) == gaps.FLOOR_S
    assert gaps.limit_s(5000) == 15.0
    assert gaps.limit_s(None, floor_s=1.0) == 3.0


def test_a_gap_needs_input_waiting_and_a_running_run():
    assert gaps.gap_of(_run(), NOW) == 30.0
    assert gaps.gap_of(_run(beat_info={"backlog_files": 0}), NOW) is None
    assert gaps.gap_of(_run(beat_info={}, trigger_active=True), NOW) == 30.0  # a batch in flight
    assert gaps.gap_of(_run(status="stopping"), NOW) is None
    assert gaps.gap_of(_run(beat_info={"backlog_files": 2, "stop_requested": True}), NOW) is None
    assert gaps.gap_of(_run(last_commit_at=NOW - timedelta(seconds=5)), NOW) is None
    # a run that has not committed yet is starting: its starter's time, not a gap
    assert gaps.gap_of(_run(last_commit_at=None), NOW) is None
    assert gaps.gap_of(_run(running_at=NOW - timedelta(seconds=20)), NOW) is None


def test_the_cause_is_named_when_it_is_known():
    assert gaps.cause_of(None, "a poll failed: connection refused", False) == "database_unavailable"
    assert gaps.cause_of("psycopg2.OperationalError: could not connect to server", None, False) \
        == "database_unavailable"
    assert gaps.cause_of("java.io.IOException: No space left on device", None, False) == "disk_full"
    assert gaps.cause_of(None, None, True) == "driver_silent"
    assert gaps.cause_of("something else", None, False) == "no_progress"


def test_a_kafka_stages_lag_is_input_waiting_and_named_in_records():
    """A Kafka stage's beat has no files: its lag in records is what waits."""
    assert gaps.gap_of(_run(beat_info={"backlog_files": 0, "backlog_rows": 500}), NOW) == 30.0
    assert gaps.waiting({"backlog_files": 0, "backlog_rows": 500}) == "500 record(s) of the topic"
    assert gaps.waiting({"backlog_files": 3}) == "3 input file(s)"
    # the soak found "0 record(s) of the topic unread" on a file stage whose batch was in flight
    assert gaps.waiting({"backlog_files": 0, "backlog_rows": 0}) == "no file or record"
