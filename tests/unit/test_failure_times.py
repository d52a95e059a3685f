"""When a failure happened (issue 48, item 8): its last healthy sighting, not its detection."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from streamops.execute import watchdog

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def _row(**kw) -> SimpleNamespace:
    base = dict(stage_id="w.s", id=7, role="primary", status="running", pid=None, beat_at=NOW,
                running_at=NOW - timedelta(hours=1),
                started_at=NOW - timedelta(hours=1), silent_s=1.0, server_up_s=3600.0, beat_info={},
                stop_reason=None, stopped_at=None)
    return SimpleNamespace(**{**base, **kw})


def test_a_stalled_run_failed_at_its_last_progress_not_its_last_beat():
    d = _row(beat_info={"backlog_files": 3, "since_progress_s": 200})
    f = watchdog._failure_of(d, 15.0, {}, 180.0, {})
    assert f is not None and f.kind == "stalled"
    assert f.failed_at == NOW - timedelta(seconds=200)
