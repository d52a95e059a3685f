"""Clocks (issue 44, item 14), against real PostgreSQL: a time one process stores and another
compares is the database's clock, never a host's wall clock, which may be minutes off.

Each test skews the wall clock of the process under test (`datetime.now`, or `time.time`, in its
module) by `SKEW`, as a host whose clock is 120 s off would be, and shows that what the driver
stores, and what the supervisor, the watchdog, a reconfiguration or a replan computes, is still
right. Each failed before the change it tests, except the staleness guard (already the
database's) and `db.time_of` (new). No real driver: a stage row, a run whose pid is a sleeping
process of the test's, and the rows a driver would write (the agent's own beat and metrics row
in one test).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta

import pytest
from sqlalchemy import text

from demo.stages import demo_job
from streamops import registry
from streamops.execute import stages, supervisor, watchdog
from streamops.store import db, failures
from streamops.store import reconfigurations as rstore

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


# -- the driver's metrics rows ---------------------------------------------------------------------
def test_a_driver_whose_clock_runs_ahead_stores_its_batches_at_the_database_s_time(clean_db, stage, tmp_path,
                                                                                  monkeypatch):
    """Spark's progress timestamp (`stage_metrics.ts`) is the driver's wall clock, 120 s ahead here:
    the status's "last minute", the policies' windows and a change's first batch compare it with
    the database's now() and commits. The agent learns its offset from its beats and stores the
    batch at the database's time."""
    from types import SimpleNamespace

    from streamops.agent import agent as agent_module
    from streamops.agent.metrics import StageContext

    real = time.time
    monkeypatch.setattr(agent_module, "time", SimpleNamespace(time=lambda: real() + SKEW.total_seconds(),
                                                               monotonic=time.monotonic))
    dep = _run(clean_db, None)
    spark = SimpleNamespace(sparkContext=SimpleNamespace(master="local[1]"))  # what a beat asks of Spark
    agent = agent_module.StageAgent(spark, StageContext("w.s", dep, 1, 2, 1000), tmp_path / "in", tmp_path / "ckpt")
    agent.writer.start()
    agent._beat()
    before = _db_clock(clean_db)
    spark_now = datetime.fromtimestamp(real(), tz=before.tzinfo) + SKEW  # the driver's JVM: the same host's clock
    agent.on_progress({"timestamp": spark_now.isoformat().replace("+00:00", "Z"), "batchId": 0, "runId": "r",
                       "numInputRows": 0, "durationMs": {"triggerExecution": 5}})
    agent.writer.close()
    with clean_db.connect() as conn:
        ts = conn.execute(text("SELECT ts FROM stage_metrics WHERE deployment_id = :d"), {"d": dep}).scalar_one()
    assert abs(ts - before) < timedelta(seconds=1), f"stored {(ts - before).total_seconds():+.1f}s off the database"


# -- the supervisor --------------------------------------------------------------------------------
def test_a_supervisor_whose_clock_runs_ahead_still_times_a_dead_driver_s_mttr_right(clean_db, stage, sleeper,
                                                                                   monkeypatch):
    """The supervisor's last sight of a driver alive is a `dead_pid` failure's time, and its MTTR
    runs to the restart's first commit, which the database dates. With the supervisor's clock
    120 s ahead the MTTR read -120 s, closed at no commit (behind, the failure fell back to the
    driver's last beat, later than the sighting). Now the sighting is the database's clock too."""
    _skew(monkeypatch, supervisor, SKEW)
    dep = _run(clean_db, sleeper.pid)
    sup = _supervisor(stage)
    sup.poll()  # sees the driver alive
    sleeper.kill()
    sleeper.wait(10)
    [f] = watchdog.detect(sup.opts.stale_s, sup._seen_alive)
    assert f.kind == "dead_pid"
    fid, _, _ = failures.open_failure("w.s", "w", dep, f.kind, f.detail, f.failed_at, detected_by="supervisor")
    with clean_db.begin() as conn:  # as the recovery ends it
        conn.execute(text("UPDATE deployments SET status = 'failed', stopped_at = now() WHERE id = :d"), {"d": dep})
    restarted = _run(clean_db, None)
    _commit_ago(clean_db, restarted, 1, 0)
    row = failures.recovered(fid, None, restarted)
    assert 0 <= row.mttr_ms < 10_000, f"MTTR {row.mttr_ms / 1000:.1f}s for a failure seconds old"


def test_a_supervisor_whose_clock_runs_ahead_sees_no_output_gap_in_a_stage_that_just_committed(clean_db, stage,
                                                                                              sleeper, monkeypatch):
    """Input waits and the stage committed 3 s ago (the database's clock). With the supervisor's
    clock 120 s ahead, its commit age read 123 s: an `output_gap` failure (downtime) for a stage
    that runs fine. The age is now the database's now minus the commit."""
    from streamops.execute import gaps

    _skew(monkeypatch, supervisor, SKEW)
    _skew(monkeypatch, gaps, SKEW)
    dep = _run(clean_db, sleeper.pid, info='{"backlog_files": 3, "since_progress_s": 3}')
    _commit_ago(clean_db, dep, 1, 3)
    _supervisor(stage, gap_floor_s=10).poll()
    assert _failures(clean_db) == []


def test_a_supervisor_whose_clock_runs_behind_still_records_an_output_gap(clean_db, stage, sleeper, monkeypatch):
    """The other way: 120 s behind, a 40 s gap read as none."""
    from streamops.execute import gaps

    _skew(monkeypatch, supervisor, -SKEW)
    _skew(monkeypatch, gaps, -SKEW)
    dep = _run(clean_db, sleeper.pid, info='{"backlog_files": 3, "since_progress_s": 40}')
    last = _commit_ago(clean_db, dep, 1, 40)
    _supervisor(stage, gap_floor_s=10).poll()
    [row] = _failures(clean_db)
    assert (row.kind, row.failed_at) == ("output_gap", last)


@pytest.mark.parametrize("by", [SKEW, -SKEW])
def test_heartbeat_staleness_is_the_database_s_whatever_the_supervisor_s_clock(clean_db, stage, sleeper,
                                                                               monkeypatch, by):
    """A guard, true before this change too: silence is `now() - beat_at`, both the database's."""
    _skew(monkeypatch, supervisor, by)
    fresh = _run(clean_db, sleeper.pid, beat_ago_s=2)
    sup = _supervisor(stage)
    sup.poll()
    assert watchdog.detect(sup.opts.stale_s, sup._seen_alive) == []
    with clean_db.begin() as conn:
        conn.execute(text("UPDATE heartbeats SET beat_at = now() - interval '70 seconds' WHERE deployment_id = :d"),
                     {"d": fresh})
    [f] = watchdog.detect(sup.opts.stale_s, sup._seen_alive)
    assert f.kind == "stale_heartbeat"


# -- a reconfiguration's output gap -----------------------------------------------------------------
def test_a_reconfiguration_s_output_gap_reaches_the_latest_commits_whatever_the_executor_s_clock(
        clean_db, stage, monkeypatch):
    """The longest gap between commits from the change on, up to now: with the executor's clock
    120 s behind, 'now' was 2 minutes ago, and the gaps of the change (10 s here) were not seen."""
    _skew(monkeypatch, rstore, -SKEW)
    dep = _run(clean_db, None)
    for batch, ago in enumerate([40, 30, 20, 10, 1], start=1):
        _commit_ago(clean_db, dep, batch, ago)
    gap_ms, _ = rstore.output_gap("w.s", _db_clock(clean_db) - timedelta(seconds=25))
    assert gap_ms == pytest.approx(10_000, abs=50)


# -- the control plane -------------------------------------------------------------------------------
def test_a_replan_on_a_host_whose_clock_runs_ahead_does_not_withdraw_fresh_requests(clean_db, stage, monkeypatch):
    """A request the driver's Operator Manager refreshed a moment ago (the database's now()) was
    withdrawn as not refreshed for 5 minutes by a replan on a host 10 minutes ahead."""
    from streamops import control

    _skew(monkeypatch, control, timedelta(minutes=10))
    _run(clean_db, None)
    with clean_db.begin() as conn:
        conn.execute(text(
            "INSERT INTO requests (stage_id, app, action, target_cores, gain, cost_ms, reason, policy, created_at, "
            "refreshed_at) VALUES ('w.s', 'w', 'scale_out', 2, 10, 1000, 'O 68 > 60', 'edf', now(), now())"))
    control.replan("w", operators=False)
    with clean_db.connect() as conn:
        status = conn.execute(text("SELECT status FROM requests WHERE stage_id = 'w.s'")).scalar_one()
    assert status != "withdrawn"


# -- a time kept without the database ----------------------------------------------------------------
def test_a_monotonic_sighting_is_dated_by_the_database_s_clock(clean_db, monkeypatch):
    """The heal passes time a dead master's, worker's or broker's last sighting with the monotonic
    clock (the database may be away then) and date it by the database's clock for its failure row."""
    seen = time.monotonic() - 3.0
    at, now = db.time_of(seen), db.now()
    assert timedelta(seconds=2.9) < now - at < timedelta(seconds=3.5)
    assert abs(db.time_of(None) - db.now()) < timedelta(seconds=1)
