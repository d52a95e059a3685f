"""A given-up stage and a busy stage under faults (issue 48, items 2 and 3).

No real driver, as in test_supervisor_gaps: a stage row, a run whose `pid` is a sleeping process
of the test's and a heartbeat row the test writes. A restart is refused by the test
(`start_stage` raises), so that no driver is ever started.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from demo.stages import demo_job
from streamops import quality, registry
from streamops.execute import reconfigure, stages, supervisor
from streamops.orchestrate import tasks
from streamops.store import failures, ledger
from streamops.store import reconfigurations as rstore
from streamops.waiting import wait_until

pytestmark = pytest.mark.db


def _registry() -> registry.Registry:
    return registry.parse({"pools": {"p": {"cores": 4}}, "apps": {"w": {
        "r_max_ms": 1000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
        "stages": {"s": {**demo_job("wordcount", {"kind": "files", "path": "w/s"}), "pool": "p",
                         "cores": {"initial": 1, "min": 1, "max": 2}}}}}})


def _run(engine, status: str, pid: int | None, cores: int = 1, role: str = "primary") -> int:
    """A run of w.s as the ledger holds it, beating now when it runs."""
    with engine.begin() as conn:
        dep = conn.execute(text(
            "INSERT INTO deployments (stage_id, role, pool, cores, state_partitions, config, launcher, checkpoint, "
            "status, pid, running_at) VALUES ('w.s', :role, 'p', :cores, 2, '{}', 'local', '/nowhere', :status, :pid, "
            "CASE WHEN :status = 'running' THEN now() END) RETURNING id"),
            {"pid": pid, "status": status, "cores": cores, "role": role}).scalar_one()
        conn.execute(text("INSERT INTO heartbeats (deployment_id, stage_id, beat_at, query_active) "
                          "VALUES (:d, 'w.s', now(), true)"), {"d": dep})
    return dep


def _give_up(dep: int, role: str = "primary") -> None:
    fid, _, _ = failures.open_failure("w.s", "w", dep, "query_failed", "a bad batch", datetime.now(UTC),
                                      role=role)
    failures.give_up(fid, "3 restarts in a row failed; last: a bad batch")


def _health(engine) -> str:
    with engine.connect() as conn:
        return conn.execute(text("SELECT health FROM stages WHERE stage_id = 'w.s'")).scalar_one()


def _failures(engine) -> list:
    with engine.connect() as conn:
        return conn.execute(text("SELECT kind, status FROM failures ORDER BY id")).all()


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


@pytest.fixture
def no_restart(monkeypatch):
    """Every start the watchdog would make, counted and refused."""
    calls = []

    def refuse(*args, **kwargs):
        calls.append((args, kwargs))
        raise RuntimeError("the test starts no driver")

    monkeypatch.setattr(stages, "start_stage", refuse)
    return calls


# -- item 2: the give-up -----------------------------------------------------------------------------
def test_a_successful_start_clears_the_give_up_whoever_started_it(clean_db):
    """Any start (the CLI's, a reconfiguration's, not only the DAG's deploy) whose driver reports
    running puts a given-up stage back under the watchdog. A replica's start does not clear the
    primary's give-up."""
    stages.sync_registry(_registry())
    old = _run(clean_db, "failed", None)
    _give_up(old)
    replica = _run(clean_db, "starting", None, role="replica-1")
    ledger.mark_running(replica, "local-1", 4242, "h")
    assert _health(clean_db) == "failed", "a replica's start cleared the primary's give-up"
    new = _run(clean_db, "starting", None)
    ledger.mark_running(new, "local-2", 4243, "h")
    assert _health(clean_db) == "ok"


def test_a_given_up_stage_is_still_watched_and_its_dead_driver_recorded_not_restarted(clean_db, sleeper, no_restart):
    """The demo: a stage given up on runs again (started before the give-up was cleared); its
    driver is killed. The supervisor records the death (the run `failed`, a failure given up)
    and restarts nothing; later polls do not record it again."""
    reg = _registry()
    stages.sync_registry(reg)
    dep = _run(clean_db, "running", sleeper.pid)
    _give_up(dep)
    options = supervisor.SupervisorOptions(poll_s=0.25, stale_s=60, warm_spares=False, wait_s=1.0, max_restarts=1,
                                           housekeeping_s=1e9)
    sup, stop, thread = supervisor.start_in_thread(reg, options)
    try:
        time.sleep(1)
        assert _failures(clean_db) == [("query_failed", "gave_up")], "a living run of a given-up stage was touched"
        sleeper.kill()
        sleeper.wait(10)
        assert wait_until(lambda: len(_failures(clean_db)) == 2, 10, 0.1), \
            "the dead driver of a given-up stage went unseen"
        time.sleep(1.5)  # several more polls
    finally:
        stop.set()
        thread.join(30)
    assert _failures(clean_db) == [("query_failed", "gave_up"), ("dead_pid", "gave_up")]
    assert ledger.deployment(dep).status == "failed"
    assert no_restart == [], "a given-up stage was restarted"
    assert _health(clean_db) == "failed"


def test_a_deploy_of_a_stopped_stage_starts_at_the_cores_it_last_had(clean_db, monkeypatch):
    """The DAG's deploy passed `cores.initial` (1): a stage that ran at 2 came back at 1. It now
    starts at its last run's cores, within the registry's bounds; a first start at `initial`."""
    asked = []

    class Admitted(Exception):
        pass

    def admit(sid, role, pool, pool_cores, cores, *_, **__):
        asked.append(cores)
        raise Admitted

    monkeypatch.setattr(registry, "load", _registry)
    monkeypatch.setattr(ledger, "admit", admit)
    with pytest.raises(Admitted):
        tasks.deploy("w")
    _run(clean_db, "stopped", None, cores=2)
    with pytest.raises(Admitted):
        tasks.deploy("w")
    with clean_db.begin() as conn:
        conn.execute(text("UPDATE deployments SET cores = 4"))  # above the registry's max now
    with pytest.raises(Admitted):
        tasks.deploy("w")
    assert asked == [1, 2, 2]


# -- item 3: a busy stage ----------------------------------------------------------------------------
def _reconfiguration(rid: int):
    return rstore.get(rid)


def test_a_users_reconfiguration_that_stays_busy_is_cancelled_with_the_reason(clean_db, sleeper, monkeypatch):
    """The DAG's reconfigure met a failover (the stage lock held): it failed with
    ReconfigurationBusy and left its row `pending`, to run later unasked. Now it waits a bounded
    time, and then cancels the row it created, with the reason."""
    reg = _registry()
    stages.sync_registry(reg)
    _run(clean_db, "running", sleeper.pid)
    monkeypatch.setattr(registry, "load", lambda: reg)
    monkeypatch.setattr(reconfigure, "BUSY_WAIT_S", 1.0)
    with rstore.stage_lock("w.s") as free:
        assert free
        with pytest.raises(reconfigure.ReconfigurationBusy) as e:
            tasks.reconfigure("w.s", "scale_out", cores=2)
    with clean_db.connect() as conn:
        row = conn.execute(text("SELECT status, outcome FROM reconfigurations")).one()
    assert row.status == "cancelled", row
    assert "busy" in row.outcome and "cancelled" in str(e.value), (row, e.value)


def test_a_users_reconfiguration_runs_once_the_stage_is_free(clean_db, sleeper):
    """The stage lock is let go within the wait: the reconfiguration runs (here it finds the
    recovery already gave the stage its target cores: nothing to change)."""
    reg = _registry()
    stages.sync_registry(reg)
    dep = _run(clean_db, "running", sleeper.pid)
    rid = reconfigure.request("w.s", "scale_out", cores=2, reg=reg)
    held, release = threading.Event(), threading.Event()

    def recovery():
        with rstore.stage_lock("w.s"):
            held.set()
            release.wait(10)
            with clean_db.begin() as conn:
                conn.execute(text("UPDATE deployments SET cores = 2 WHERE id = :d"), {"d": dep})

    t = threading.Thread(target=recovery)
    t.start()
    held.wait(10)
    threading.Timer(1.0, release.set).start()
    said = []
    o = reconfigure.execute_requested(rid, gate=quality.gate_new_run, reg=reg, progress=said.append, busy_wait_s=20)
    t.join(10)
    assert o.status == "cancelled" and o.detail.startswith("nothing to change"), o
    assert any("busy" in s for s in said), said


def test_a_paused_stage_lock_is_free_meanwhile_and_taken_back_after(clean_db):
    """The launch retry's wait (watchdog.recover) lets the stage's advisory lock go and takes it
    back; if another caller holds it then, the lock is not taken back (issue 44, item 13)."""
    def free_now() -> bool:
        out: list[bool] = []

        def look():
            with rstore.stage_lock("p.s") as free:
                out.append(bool(free))
        t = threading.Thread(target=look)
        t.start()
        t.join(10)
        return out[0]

    with rstore.stage_lock("p.s") as lock:
        assert lock and not free_now()
        seen = []
        t = threading.Timer(0.2, lambda: seen.append(free_now()))
        t.start()
        assert lock.pause(1.0), "taken back after the wait"
        t.join()
        assert seen == [True], "another caller could not take the lock during the wait"
        assert not free_now()
        with rstore.stage_lock("p.s"):
            pass
    assert free_now()
