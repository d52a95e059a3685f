"""Pending reconfigurations nobody will run as asked are cancelled with the reason (issue 48
item 3, the rest): a reconfigure DAG run that failed (an error, or the task killed) before its
row was claimed left it `pending` ("scale_in→1 pending" 8 minutes later), a re-plan grant that
met a busy stage too, and a pending row survived `streamops down` and a new demo.

No driver: a stage row and a run row, as in test_give_up_and_busy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from streamops import registry
from streamops.execute import pending, reconfigure, stages
from streamops.orchestrate import tasks
from streamops.store import reconfigurations as rstore
from tests.integration.test_give_up_and_busy import _registry, _run

pytestmark = pytest.mark.db


@pytest.fixture
def stage(clean_db, monkeypatch):
    reg = _registry()
    stages.sync_registry(reg)
    _run(clean_db, "running", None)
    monkeypatch.setattr(registry, "load", lambda: reg)
    return reg


def _rows(engine) -> list:
    with engine.connect() as conn:
        return conn.execute(text("SELECT id, status, outcome, requested_by FROM reconfigurations ORDER BY id")).all()


def _pending(engine, action: str, by: str, ago: timedelta, cores: int | None = 2) -> int:
    with engine.begin() as conn:
        return conn.execute(text(
            "INSERT INTO reconfigurations (stage_id, app, action, from_cores, target_cores, from_pool, target_pool, "
            "requested_by, requested_at) VALUES ('w.s', 'w', :action, 1, :cores, 'p', 'p', :by, now() - :ago) "
            "RETURNING id"), {"action": action, "cores": cores, "by": by, "ago": ago}).scalar_one()


@pytest.mark.parametrize("end", [RuntimeError("server closed the connection unexpectedly"), KeyboardInterrupt()],
                         ids=["an error", "the task killed"])
def test_a_request_whose_run_ends_before_it_starts_is_cancelled(stage, clean_db, monkeypatch, end):
    """The DAG's task failed (here: the database went away, or Airflow's SIGTERM) after the row
    was recorded and before it was claimed: it stayed pending, to run later unasked."""
    def fail(*_a, **_k):
        raise end

    monkeypatch.setattr(reconfigure, "execute", fail)
    with pytest.raises(type(end)):
        tasks.reconfigure("w.s", "scale_out", cores=2)
    ((_, status, outcome, _),) = _rows(clean_db)
    assert status == "cancelled", outcome
    assert type(end).__name__ in outcome and "nothing was changed" in outcome, outcome


def test_a_granted_scale_out_that_meets_a_busy_stage_is_cancelled(stage, clean_db, monkeypatch):
    """Re-plan's realize run (resume_pending with the grant's id) met a failover: it failed with
    ReconfigurationBusy at once and the grant stayed pending. Now it waits, then cancels it."""
    monkeypatch.setattr(reconfigure, "BUSY_WAIT_S", 1.0)
    rid = _pending(clean_db, "scale_out", "policy:ds2", timedelta(0))
    with rstore.stage_lock("w.s") as free:
        assert free
        with pytest.raises(reconfigure.ReconfigurationBusy):
            tasks.reconfigure("w.s", "resume_pending", reconfiguration=rid)
    ((_, status, outcome, _),) = _rows(clean_db)
    assert status == "cancelled" and "busy" in outcome, outcome


def test_a_pending_row_past_its_bound_is_cancelled_and_a_fresh_one_kept(stage, clean_db):
    """What a killed task (SIGKILL) or a crashed CLI leaves: the watchdog and the supervisor's
    housekeeping cancel it once it is older than its bound."""
    fresh = _pending(clean_db, "scale_out", "user:ann", timedelta(minutes=2))
    assert pending.cancel_stale(stage) == []
    with clean_db.begin() as conn:
        conn.execute(text("UPDATE reconfigurations SET requested_at = now() - interval '11 minutes'"))
    with rstore.stage_lock("w.s"):  # its executor may be claiming it: left for the next pass
        assert pending.cancel_stale(stage) == []
    assert pending.cancel_stale(stage) == [fresh]
    ((_, status, outcome, _),) = _rows(clean_db)
    assert status == "cancelled" and "stale" in outcome and "user:ann" in outcome, outcome
    # A policy's deferred scale-in, granted in the window (03:00 for 30 min), waits for it; one
    # asked for before yesterday's window closed is stale.
    _pending(clean_db, "scale_in", "policy:ds2", timedelta(hours=30), cores=1)
    assert len(pending.cancel_stale(stage)) == 1
    assert "maintenance window closed" in _rows(clean_db)[-1].outcome


def test_the_watchdog_cancels_a_stale_pending_row(stage, clean_db, monkeypatch):
    from streamops.execute import watchdog

    rid = _pending(clean_db, "scale_in", "user:ann", timedelta(days=2), cores=1)
    for name in ("heal_cluster", "close_late_failures"):
        monkeypatch.setattr(watchdog, name, lambda *a, **k: SimpleNamespace(workers=[]))
    monkeypatch.setattr(watchdog.broker_heal, "heal_broker", lambda *a, **k: None)
    watchdog.cycle(stage)
    assert [(r.id, r.status) for r in _rows(clean_db)] == [(rid, "cancelled")]


def _at(hh: int, mm: int, day: int = 27) -> datetime:
    return datetime(2026, 11, day, hh, mm, tzinfo=UTC)


@pytest.mark.parametrize("action, by, asked, stale_at", [
    ("scale_out", "user:ann", _at(10, 0), _at(10, 10)),            # run at once, or lost
    ("upgrade", "user:ann", _at(10, 0), _at(10, 10)),
    ("scale_in", "user:ann", _at(10, 0), _at(3, 40, 28)),          # --no-wait: the next window (03:00, 30 min)
    ("scale_in", "policy:ds2", _at(3, 10), _at(3, 40)),            # granted in the window: that window
    ("migrate", "policy:ds2", _at(3, 29), _at(3, 40)),
])
def test_the_bound_of_a_pending_row(action, by, asked, stale_at):
    row = SimpleNamespace(app="w", action=action, requested_by=by, requested_at=asked)
    assert pending.deadline(row, _registry()) == stale_at
    # the same instant read from a server whose TimeZone is not UTC: the window's cron is still UTC
    paris = SimpleNamespace(app="w", action=action, requested_by=by,
                            requested_at=asked.astimezone(timezone(timedelta(hours=1))))
    assert pending.deadline(paris, _registry()) == stale_at
    # an app the registry does not have: its deferred changes get a day, its others the usual 10 min
    gone = SimpleNamespace(app="gone", action=action, requested_by=by, requested_at=asked)
    wait = timedelta(days=1) if action in ("scale_in", "migrate") else timedelta(minutes=10)
    assert pending.deadline(gone, _registry()) == asked + wait


def test_a_host_clock_that_runs_ahead_cancels_no_fresh_pending_row(stage, clean_db, monkeypatch):
    """Staleness is timed by the database's clock, as `requested_at` is (docs/ha.md, "Clocks")."""
    from tests.integration.test_clocks import _skew

    rid = _pending(clean_db, "scale_out", "policy:ds2", timedelta(0))
    _skew(monkeypatch, pending, timedelta(minutes=20))
    assert pending.cancel_stale(_registry()) == []
    assert [(r.id, r.status) for r in _rows(clean_db)] == [(rid, "pending")]


def test_down_cancels_every_pending_row(stage, clean_db, monkeypatch):
    """A pending row survived `streamops down` and ran after the next start, unasked."""
    from streamops import kafka_broker, spark_cluster
    from streamops.cli import app
    from streamops.execute import replicas
    from streamops.orchestrate import airflow_home

    rid = _pending(clean_db, "scale_in", "policy:ds2", timedelta(0), cores=1)
    monkeypatch.setattr(airflow_home, "down", lambda *a, **k: [])
    monkeypatch.setattr(spark_cluster, "down", lambda *a, **k: False)
    monkeypatch.setattr(kafka_broker, "down", lambda *a, **k: False)
    stopped = []
    monkeypatch.setattr(replicas, "stop_with_replicas", lambda sid, *a, **k: stopped.append(sid))
    result = CliRunner().invoke(app, ["down"])
    assert result.exit_code == 0, result.output
    assert f"reconfiguration {rid} (scale_in→1) cancelled: the platform went down" in result.output, result.output
    ((_, status, outcome, _),) = _rows(clean_db)
    assert status == "cancelled" and "streamops down" in outcome
    assert stopped == ["w.s"]
