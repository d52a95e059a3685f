"""The supervisor tells a database gap from a hung driver (review of the supervisor, items 6 and 7).

No real driver: a stage row, a run whose `pid` is a sleeping process of the test's (in a
session of its own, as a driver leads its process group) and a heartbeat row the test writes.
A kill is seen as that process gone; a restart is refused by the test (`start_stage` raises),
so that a wrong kill ends as a `retrying` recovery, not as a real driver started.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from datetime import UTC

import pytest
from sqlalchemy import text

from demo.stages import demo_job
from streamops import registry
from streamops.execute import replicas, stages, supervisor
from streamops.waiting import wait_until

pytestmark = pytest.mark.db

STALE_S = 2.0


@pytest.fixture
def beating_run(clean_db, monkeypatch):
    """Stage w.s and its running run, beating now; (registry, deployment id, its process)."""
    reg = registry.parse({"pools": {"p": {"cores": 2}}, "apps": {"w": {
        "r_max_ms": 1000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
        "stages": {"s": {**demo_job("wordcount", {"kind": "files", "path": "w/s"}), "pool": "p",
                         "cores": {"initial": 1, "max": 1}}}}}})
    stages.sync_registry(reg)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    with clean_db.begin() as conn:
        dep = conn.execute(text(
            "INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, status, "
            "pid, running_at) VALUES ('w.s', 'p', 1, 2, '{}', 'local', '/nowhere', 'running', :pid, now()) "
            "RETURNING id"), {"pid": proc.pid}).scalar_one()
        conn.execute(text("INSERT INTO heartbeats (deployment_id, stage_id, beat_at, query_active) "
                          "VALUES (:d, 'w.s', now(), true)"), {"d": dep})

    def no_restart(*_, **__):
        raise RuntimeError("the test starts no driver")

    monkeypatch.setattr(stages, "start_stage", no_restart)
    yield reg, dep, proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


def _supervise(reg, **opts):
    """A supervisor's `run` in a thread, polling every 0.25 s; (supervisor, stop it)."""
    options = supervisor.SupervisorOptions(poll_s=0.25, stale_s=STALE_S, warm_spares=False, wait_s=1.0,
                                           max_restarts=1, **opts)
    sup, stop, thread = supervisor.start_in_thread(reg, options)

    def end() -> None:
        stop.set()
        thread.join(30)

    return sup, end


def _failures(engine) -> list:
    with engine.connect() as conn:
        return conn.execute(text("SELECT kind, detected_by FROM failures ORDER BY id")).all()


def test_a_lock_that_holds_every_heartbeat_back_is_a_database_gap_not_hung_drivers(beating_run, clean_db):
    """Item 6: `heartbeats` held under an EXCLUSIVE lock (a long migration) for three times the
    stale limit: reads pass, every beat waits. The supervisor records nothing and kills
    nothing; once the lock is gone, a run that stays silent is still found and killed."""
    reg, dep, proc = beating_run
    sup, end = _supervise(reg, housekeeping_s=1e9)
    try:
        with clean_db.connect() as locker:
            locker.execute(text("LOCK TABLE heartbeats IN EXCLUSIVE MODE"))
            time.sleep(3 * STALE_S)
            assert _failures(clean_db) == [], "a failure recorded while the database held every beat back"
            assert proc.poll() is None, "the run's driver was killed while the database held its beats back"
            locker.rollback()
        # The lock is gone and the run stays silent (no driver beats): a hung driver, found.
        assert wait_until(lambda: _failures(clean_db), 3 * STALE_S + 3, 0.1) == [("stale_heartbeat", "supervisor")]
        assert wait_until(lambda: proc.poll() is not None, 5, 0.1), "the silent run was not killed"
    finally:
        end()


def test_a_gap_that_begins_after_the_look_is_caught_before_the_kill(beating_run, clean_db):
    """Item 6, the second look: the database stops taking beats between the supervisor's look and
    the kill. After the failure row is written, a fresh write probe fails: the row goes, the run
    lives."""
    from datetime import datetime

    from streamops.execute import watchdog

    reg, dep, proc = beating_run
    f = watchdog.Failure("w.s", dep, "stale_heartbeat", "no heartbeat for 20s (limit 15s)", datetime.now(UTC))
    with clean_db.connect() as locker:
        locker.execute(text("LOCK TABLE heartbeats IN EXCLUSIVE MODE"))
        rec = watchdog.recover(f, "w", reg, detected_by="supervisor", probe_s=0.2)
        locker.rollback()
    assert rec.status == "withdrawn" and rec.detail.startswith("a write probe failed: canceling statement"), rec
    assert _failures(clean_db) == [] and proc.poll() is None


def test_a_failing_housekeeping_step_is_logged_and_counted_and_hang_detection_goes_on(beating_run, clean_db,
                                                                                        monkeypatch, caplog):
    """Item 7: any exception from housekeeping was taken for a database gap, every pass: with a
    step failing, a run silent past the limit was never found. Now the step's failure is logged
    with its traceback and counted, and the silent run is found as if housekeeping were healthy."""
    reg, dep, proc = beating_run

    def broken(*_, **__):
        raise ValueError("a bug in a housekeeping step")

    monkeypatch.setattr(replicas, "reconcile", broken)
    caplog.set_level(logging.WARNING, logger="streamops.supervisor")
    sup, end = _supervise(reg, housekeeping_s=0.1)  # every pass
    try:
        assert wait_until(lambda: _failures(clean_db), 3 * STALE_S + 3, 0.1) == [("stale_heartbeat", "supervisor")]
        assert wait_until(lambda: proc.poll() is not None, 5, 0.1), "the silent run was not killed"
    finally:
        end()
    logged = [r for r in caplog.records if "replicas" in r.getMessage() and r.exc_info]
    assert logged and logged[0].exc_info[0] is ValueError, [r.getMessage() for r in caplog.records]
    assert "housekeeping step; heartbeats are not judged" not in caplog.text, "a step's failure is not the database's"
    step = sup.housekeeping_failures["replicas"]
    assert step.count >= 2 and step.error == "ValueError: a bug in a housekeeping step", step
