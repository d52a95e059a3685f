"""Clocks (issue 44, item 14), against real PostgreSQL: a time one process stores and another
compares is the database's clock, never a host's wall clock, which may be minutes off.

Each test skews the wall clock of the process under test (`datetime.now` in its module) by
`SKEW`, as a host whose clock is 120 s off would be, and shows that the figure the supervisor,
the watchdog or a reconfiguration computes is still right. No real driver: a stage row, a run
whose pid is a sleeping process of the test's, and the rows a driver would write.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta

import pytest
from sqlalchemy import text

from streamops import registry
from streamops.execute import stages, supervisor
from streamops.store import db
from tests.demo_jobs import demo_job

pytestmark = pytest.mark.db

SKEW = timedelta(seconds=120)


def _skew(monkeypatch, module, by: timedelta) -> None:
    """`module`'s datetime.now() runs `by` off the real clock (its host's clock is wrong)."""

    class Skewed(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.now(tz) + by

    monkeypatch.setattr(module, "datetime", Skewed, raising=False)


def _registry() -> registry.Registry:
    return registry.parse({"pools": {"p": {"cores": 4}}, "apps": {"w": {
        "r_max_ms": 1000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
        "stages": {"s": {**demo_job("wordcount", {"kind": "files", "path": "w/s"}), "pool": "p",
                         "cores": {"initial": 1, "min": 1, "max": 2}}}}}})


def _run(engine, pid: int | None, *, info: str = "{}", beat_ago_s: float = 0.0) -> int:
    """A running run of w.s, started 10 minutes ago, its last beat `beat_ago_s` ago (the database's clock)."""
    with engine.begin() as conn:
        dep = conn.execute(text(
            "INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, status, "
            "pid, started_at, running_at) VALUES ('w.s', 'p', 1, 2, '{}', 'local', '/nowhere', 'running', :pid, "
            "now() - interval '10 minutes', now() - interval '10 minutes') RETURNING id"), {"pid": pid}).scalar_one()
        conn.execute(text("INSERT INTO heartbeats (deployment_id, stage_id, beat_at, query_active, info) "
                          "VALUES (:d, 'w.s', now() - make_interval(secs => :ago), true, CAST(:info AS jsonb))"),
                     {"d": dep, "info": info, "ago": beat_ago_s})
    return dep


def _commit_ago(engine, dep: int, batch: int, ago_s: float) -> datetime:
    """A commit of `dep` `ago_s` seconds ago by the database's clock, as the sink writes it now."""
    with engine.begin() as conn:
        return conn.execute(text(
            "INSERT INTO sink_commits (stage_id, deployment_id, batch_id, rows, committed_at) "
            "VALUES ('w.s', :d, :b, 10, clock_timestamp() - make_interval(secs => :ago)) RETURNING committed_at"),
            {"d": dep, "b": batch, "ago": ago_s}).scalar_one()


def _db_clock(engine) -> datetime:
    with engine.connect() as conn:
        return conn.execute(text("SELECT clock_timestamp()")).scalar_one()


def _failures(engine) -> list:
    with engine.connect() as conn:
        return conn.execute(text("SELECT * FROM failures ORDER BY id")).all()


@pytest.fixture
def stage(clean_db):
    reg = _registry()
    stages.sync_registry(reg)
    return reg


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


def _supervisor(reg, **opts) -> supervisor.Supervisor:
    return supervisor.Supervisor(reg, supervisor.SupervisorOptions(
        poll_s=0.25, stale_s=60, warm_spares=False, wait_s=1.0, max_restarts=1, **opts))


# -- the driver's commit ---------------------------------------------------------------------------
def test_a_sink_commit_is_dated_by_the_database_not_by_the_driver(clean_db, stage, monkeypatch):
    """The driver's clock 120 s ahead: its commit (the MTTR's and the output gap's end, the
    latency's end) was stored 120 s in the future. Now it is the database's clock at the commit,
    and the sink returns that same time (the latency is measured to it)."""
    from streamops.agent import sinks

    _skew(monkeypatch, sinks, SKEW)
    dep = _run(clean_db, None)
    before = _db_clock(clean_db)
    committed = sinks.PostgresUpsertSink("w.s", dep).apply_and_commit(1, 0, 0)
    after = _db_clock(clean_db)
    with clean_db.connect() as conn:
        stored = conn.execute(text("SELECT committed_at FROM sink_commits WHERE deployment_id = :d"),
                              {"d": dep}).scalar_one()
    assert before <= stored <= after, f"stored {stored}, the database's clock {before}..{after}"
    assert committed == stored


# -- the driver's heartbeat ------------------------------------------------------------------------
def test_a_beat_held_back_by_a_lock_is_dated_when_it_is_written(clean_db, stage):
    """A beat waits 1 s behind an EXCLUSIVE lock on `heartbeats` (a migration): it is dated when
    it got through (clock_timestamp()), not when its transaction began (now()), so it does not
    read 1 s, or a long lock's minutes, old the moment it is written."""
    dep = _run(clean_db, None, beat_ago_s=30)
    params = {"deployment_id": dep, "stage_id": "w.s", "query_active": True, "trigger_active": False,
              "last_batch_id": None, "info": "{}"}

    def beat() -> None:  # as agent.Agent._beat writes it
        with db.transaction(durable=False) as conn:
            conn.execute(db.query("heartbeat_upsert"), params)

    with clean_db.connect() as locker:
        locker.execute(text("BEGIN"))
        locker.execute(text("LOCK TABLE heartbeats IN EXCLUSIVE MODE"))
        t = threading.Thread(target=beat)
        t.start()
        time.sleep(1.0)
        released = locker.execute(text("SELECT clock_timestamp()")).scalar_one()
        locker.execute(text("COMMIT"))
    t.join(10)
    with clean_db.connect() as conn:
        beat_at = conn.execute(text("SELECT beat_at FROM heartbeats WHERE deployment_id = :d"), {"d": dep}).scalar_one()
    assert beat_at >= released, f"dated {(released - beat_at).total_seconds():.2f}s before it was written"


