"""Figures that say the wrong thing (issue 48, items 5–8), against real PostgreSQL.

No real driver, as in test_give_up_and_busy: a stage row, a run whose `pid` is a sleeping process
of the test's, and the heartbeats, commits and metrics a driver would write, written by the test.
"""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from demo.stages import demo_job
from streamops import registry, spark_cluster
from streamops.execute import stages, supervisor, watchdog
from streamops.store import failures, ledger
from streamops.store import reconfigurations as rstore

pytestmark = pytest.mark.db


def _registry() -> registry.Registry:
    return registry.parse({"pools": {"p": {"cores": 4}}, "apps": {"w": {
        "r_max_ms": 1000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
        "stages": {"s": {**demo_job("wordcount", {"kind": "files", "path": "w/s"}), "pool": "p",
                         "cores": {"initial": 1, "min": 1, "max": 2}}}}}})


def _sync(engine, reg: registry.Registry) -> None:
    """The registry's apps, registered an hour ago: the report observes an app from then on."""
    stages.sync_registry(reg)
    with engine.begin() as conn:
        conn.execute(text("UPDATE apps SET created_at = now() - interval '1 hour'"))


def _now() -> datetime:
    return datetime.now(UTC)


def _run(engine, status: str, pid: int | None, *, info: str = "{}", since_s: float = 600,
         pool: str = "p") -> int:
    """A run of w.s started `since_s` ago, beating now with `info`."""
    with engine.begin() as conn:
        dep = conn.execute(text(
            "INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, status, "
            "pid, started_at, running_at) VALUES ('w.s', :pool, 1, 2, '{}', 'local', '/nowhere', :status, :pid, "
            "now() - make_interval(secs => :since), now() - make_interval(secs => :since)) RETURNING id"),
            {"pid": pid, "status": status, "since": since_s, "pool": pool}).scalar_one()
        conn.execute(text("INSERT INTO heartbeats (deployment_id, stage_id, beat_at, query_active, info) "
                          "VALUES (:d, 'w.s', now(), true, CAST(:info AS jsonb))"), {"d": dep, "info": info})
    return dep


def _commit(engine, dep: int, batch: int, at: datetime) -> None:
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO sink_commits (stage_id, deployment_id, batch_id, rows, committed_at) "
                          "VALUES ('w.s', :d, :b, 10, :at)"), {"d": dep, "b": batch, "at": at})


def _failures(engine) -> list:
    with engine.connect() as conn:
        return conn.execute(text("SELECT * FROM failures ORDER BY id")).all()


def _failure_downtime_s(engine) -> float:
    """downtime_daily's failure seconds of app w, today and yesterday (a gap may cross midnight)."""
    with engine.connect() as conn:
        return conn.execute(text("SELECT sum(downtime_failure_s) FROM reporting.downtime_daily "
                                 "WHERE day >= current_date - 1 AND app = 'w'")).scalar_one()


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


# -- item 5: output gaps are downtime, whatever the cause --------------------------------------------
def test_input_waiting_with_no_commit_is_an_output_gap_closed_at_the_next_commit(clean_db, sleeper):
    """A driver that beats, with input waiting and no commit for 40 s (a full disk: its last error
    says so): an `output_gap` failure naming the cause, backdated to the last commit, closed at the
    next commit with the gap as its downtime, and counted by downtime_daily."""
    reg = _registry()
    _sync(clean_db, reg)
    info = ('{"backlog_files": 3, "since_progress_s": 40, '
            '"last_error": "java.io.IOException: No space left on device"}')
    dep = _run(clean_db, "running", sleeper.pid, info=info)
    last = _now() - timedelta(seconds=40)
    _commit(clean_db, dep, 1, last)
    sup = _supervisor(reg)
    sup.poll()
    rows = _failures(clean_db)
    assert [(r.kind, r.status) for r in rows] == [("output_gap", "recovering")], rows
    assert "disk_full" in rows[0].detail, rows[0].detail
    assert rows[0].failed_at == last and rows[0].last_commit_at == last
    assert sleeper.poll() is None, "an output gap is recorded, not killed"
    nxt = _now()
    _commit(clean_db, dep, 2, nxt)
    sup.housekeeping()
    row = _failures(clean_db)[0]
    assert (row.status, row.recovered_at) == ("recovered", nxt)
    assert row.downtime_ms == pytest.approx((nxt - last).total_seconds() * 1000)
    assert _failure_downtime_s(clean_db) == pytest.approx((nxt - last).total_seconds(), abs=0.01)


def test_an_idle_stage_without_commits_is_no_output_gap(clean_db, sleeper):
    """No input waiting: a stage that has nothing to commit is not down."""
    reg = _registry()
    _sync(clean_db, reg)
    dep = _run(clean_db, "running", sleeper.pid, info='{"backlog_files": 0, "since_progress_s": 400}')
    _commit(clean_db, dep, 1, _now() - timedelta(seconds=400))
    _supervisor(reg).poll()
    assert _failures(clean_db) == []


def test_a_database_outage_the_supervisor_lived_through_is_recorded_once_it_is_back(clean_db, sleeper,
                                                                                   monkeypatch):
    """The supervisor's polls fail while the database is away; the driver commits the moment it
    is back (its beat says no stall: the wait was the database's). After the return the gap is an
    `output_gap` failure naming `database_unavailable`, closed at that commit."""
    reg = _registry()
    _sync(clean_db, reg)
    dep = _run(clean_db, "running", sleeper.pid, info='{"backlog_files": 0, "since_progress_s": 0.5}')
    last = _now() - timedelta(seconds=1)
    _commit(clean_db, dep, 1, last)
    sup = _supervisor(reg, gap_floor_s=1.0)
    assert sup._poll_once()
    real = failures.watchdog_candidates

    def away():
        raise OperationalError("SELECT 1", {}, Exception("connection refused"))

    monkeypatch.setattr(failures, "watchdog_candidates", away)
    for _ in range(8):  # 4 s of failed polls: past the gap limit of 3 triggers (1 s)
        assert not sup._poll_once()
        time.sleep(0.5)
    monkeypatch.setattr(failures, "watchdog_candidates", real)
    back = _now()
    _commit(clean_db, dep, 2, back)  # the held batch, committed at once
    assert sup._poll_once()
    sup.housekeeping()
    rows = _failures(clean_db)
    assert [(r.kind, r.status) for r in rows] == [("output_gap", "recovered")], rows
    assert "database_unavailable" in rows[0].detail, rows[0].detail
    assert rows[0].downtime_ms == pytest.approx((back - last).total_seconds() * 1000)


# -- item 6: a given-up failure ends at a later run's first commit ----------------------------------
def test_a_given_up_failure_ends_at_the_first_commit_of_a_later_run(clean_db):
    reg = _registry()
    _sync(clean_db, reg)
    old = _run(clean_db, "failed", None, since_s=900)
    failed_at = _now() - timedelta(seconds=600)
    fid, _, _ = failures.open_failure("w.s", "w", old, "query_failed", "a bad batch", failed_at)
    failures.give_up(fid, "3 restarts in a row failed")
    new = _run(clean_db, "running", None, since_s=320)
    repaired = _now() - timedelta(seconds=300)
    _commit(clean_db, new, 1, repaired)
    _commit(clean_db, new, 2, repaired + timedelta(seconds=1))
    watchdog.close_late_failures()
    row = _failures(clean_db)[0]
    assert row.status == "gave_up" and row.recovered_at == repaired, row
    assert row.recovery_deployment_id == new
    assert row.downtime_ms == pytest.approx((repaired - failed_at).total_seconds() * 1000)
    assert _failure_downtime_s(clean_db) == pytest.approx((repaired - failed_at).total_seconds(), abs=0.01)


# -- item 7: a live scale-out's first batch is the first on the new executors ------------------------
def test_a_live_changes_first_batch_is_the_first_to_start_after_the_executors_registered(clean_db):
    """Commits every second; the scale is asked at 10.2; the batch in flight commits at 17.78 (a
    7.58 s gap); the executors registered at 17.0; the first batch on them starts at 17.8 and
    commits at 29.14 (11.36 s). Its commit is the change's first batch, and the gap over it is
    the change's downtime."""
    _sync(clean_db, _registry())
    dep = _run(clean_db, "running", None, since_s=3600)
    t0 = _now() - timedelta(seconds=60)
    at = lambda s: t0 + timedelta(seconds=s)  # noqa: E731
    batches = [(b, at(b - 0.5), at(b)) for b in range(1, 11)] + [(11, at(10.2), at(17.78)), (12, at(17.8), at(29.14))]
    with clean_db.begin() as conn:
        for b, start, done in batches:
            conn.execute(text("INSERT INTO stage_metrics (ts, stage_id, deployment_id, run_id, batch_id, input_rows, "
                              "batch_duration_ms) VALUES (:ts, 'w.s', :d, 'r', :b, 10, 1)"),
                         {"ts": start, "d": dep, "b": b})
            conn.execute(text("INSERT INTO sink_commits (stage_id, deployment_id, batch_id, rows, committed_at) "
                              "VALUES ('w.s', :d, :b, 10, :at)"), {"d": dep, "b": b, "at": done})
    registered = at(17.0)
    assert ledger.first_commit(dep, after=registered) == at(29.14)
    gap, _ = rstore.output_gap("w.s", at(10.2))
    assert gap == pytest.approx(11360, abs=1)


def test_a_live_change_starts_counting_when_the_new_executors_registered(monkeypatch):
    """`changed_at` (after which the first batch is waited for) is taken when the driver's scale
    command returns (the executors registered), not when it was sent."""
    from types import SimpleNamespace

    from streamops.execute.mechanisms import live

    def slow_command(*_, **__):
        time.sleep(0.3)
        return SimpleNamespace(detail="scaled")

    monkeypatch.setattr(live, "driver_command", slow_command)
    monkeypatch.setattr(live.ledger, "record_scaling", lambda *a, **k: True)
    ex = SimpleNamespace(stamp=lambda phase: None, progress=lambda _: None, stage_id="w.s", row=SimpleNamespace(id=1),
                         changed_at=None)
    sent = _now()
    live.LiveScale()._scale(ex, SimpleNamespace(id=7, cores=1), 2)
    assert ex.changed_at >= sent + timedelta(seconds=0.3)


# -- item 8: a failure is timed from its last healthy sighting ---------------------------------------
def test_master_lost_is_timed_from_the_last_pass_that_saw_the_master_alive(clean_db, sleeper, monkeypatch):
    with clean_db.begin() as conn:
        conn.execute(text("INSERT INTO pools (name, master, cores) VALUES ('e', 'embedded', 4)"))
    reg = _registry()
    _sync(clean_db, reg)
    _run(clean_db, "running", sleeper.pid, pool="e")
    cluster = spark_cluster.Cluster(7077, 8080, 4242, [])
    alive = {4242: True}
    monkeypatch.setattr(spark_cluster, "load_record", lambda: cluster)
    monkeypatch.setattr(spark_cluster.processes, "is_alive", lambda pid: alive.get(pid, True))

    def restart_master(*_, **__):
        time.sleep(1.0)  # a master takes seconds to come back
        return spark_cluster.Cluster(7077, 8080, 4343, [])

    monkeypatch.setattr(spark_cluster, "_start_master", restart_master)
    watchdog.heal_cluster("supervisor")
    seen = _now()
    alive[4242] = False  # killed after that pass
    watchdog.heal_cluster("supervisor")
    rows = _failures(clean_db)
    assert [r.kind for r in rows] == ["master_lost"]
    assert rows[0].failed_at <= seen, f"failed_at {rows[0].failed_at} is after the last sighting {seen}"


def test_a_run_whose_state_the_code_cannot_read_is_given_up_at_once(clean_db):
    """A driver that stopped with Spark's state schema refusal (its reason starts with
    state_schema.MARKER): one failure, given up on the first pass, with the reason and no
    restart, since the same code would fail on the same state again."""
    from streamops.agent import state_schema
    from streamops.execute import watchdog

    reg = _registry()
    _sync(clean_db, reg)
    dep = _run(clean_db, "failed", None)
    reason = (f"query w.s terminated: {state_schema.MARKER} the job's code cannot read the checkpoint's state "
              "(STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE; operator 0 (stateStoreSave)): value fields added: sum")
    with clean_db.begin() as conn:
        conn.execute(text("UPDATE deployments SET stop_reason = :r, stopped_at = now() WHERE id = :d"),
                     {"r": reason, "d": dep})
    [rec] = watchdog.cycle(reg, stale_s=60).recoveries
    assert (rec.kind, rec.status, rec.attempts) == ("query_failed", "gave_up", 0), rec
    assert [(f.kind, f.status) for f in _failures(clean_db)] == [("query_failed", "gave_up")]
    with clean_db.connect() as conn:
        runs = conn.execute(text("SELECT count(*) FROM deployments WHERE stage_id = 'w.s'")).scalar_one()
    assert runs == 1, "not restarted into the same refusal"
    assert not watchdog.cycle(reg, stale_s=60).recoveries, "a second pass leaves it given up"
