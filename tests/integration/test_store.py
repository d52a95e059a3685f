"""Embedded PostgreSQL and schema migrations, against the real server."""

from __future__ import annotations

import os
import subprocess
import time
from datetime import UTC
from pathlib import Path

import psycopg2
import pytest
from sqlalchemy import create_engine, inspect, text

from demo.stages import demo_job
from streamops.store import db, embedded, migrate, roles
from tests.conftest import drop_database, recreate_database


@pytest.fixture
def scratch_url(test_env):
    """An empty database of its own, dropped afterwards."""
    name = f"streamops_test_migrate_{os.getpid()}"
    yield recreate_database(test_env["server"], name)
    drop_database(test_env["server"], name)


@pytest.mark.db
def test_migrations_run_twice_without_harm(scratch_url):
    eng = create_engine(db.sqlalchemy_url(scratch_url))
    try:
        first = migrate.apply(eng)
        assert [m.version for m in first] == [m.version for m in migrate.discover()]
        assert migrate.apply(eng) == []
        with eng.connect() as conn:
            versions = conn.execute(text("SELECT version FROM schema_migrations ORDER BY 1")).scalars().all()
        assert versions == [m.version for m in first]
        tables = set(inspect(eng).get_table_names())
        assert {"apps", "stages", "pools", "deployments", "stage_metrics", "heartbeats",
                "stage_commands", "quarantine", "sink_outputs", "sink_commits"} <= tables
    finally:
        eng.dispose()


@pytest.mark.db
def test_failed_migration_rolls_back_and_applies_later(scratch_url, tmp_path):
    eng = create_engine(db.sqlalchemy_url(scratch_url))
    (tmp_path / "001_ok.sql").write_text("CREATE TABLE a (x int);")
    (tmp_path / "002_half.sql").write_text("CREATE TABLE b (x int);\nINSERT INTO b VALUES ('not a number');")
    try:
        with pytest.raises(migrate.MigrationError, match="002_half.sql failed and was rolled back"):
            migrate.apply(eng, tmp_path)
        insp = inspect(eng)
        assert insp.has_table("a") and not insp.has_table("b"), "the failed file must leave no table behind"
        (tmp_path / "002_half.sql").write_text("CREATE TABLE b (x int);\nINSERT INTO b VALUES (1);")
        assert [m.name for m in migrate.apply(eng, tmp_path)] == ["half"]
        assert migrate.apply(eng, tmp_path) == []
    finally:
        eng.dispose()


def test_badly_named_migration_is_refused(tmp_path):
    (tmp_path / "1_short.sql").write_text("SELECT 1;")
    with pytest.raises(ValueError, match="NNN_name.sql"):
        migrate.discover(tmp_path)


@pytest.mark.db
def test_metrics_are_partitioned_by_day(engine):
    with engine.begin() as conn:
        created = conn.execute(text("SELECT ensure_stage_metrics_partitions(current_date + 10, 2)")).scalar_one()
        again = conn.execute(text("SELECT ensure_stage_metrics_partitions(current_date + 10, 2)")).scalar_one()
        parts = conn.execute(text(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'stage_metrics'::regclass")).scalar_one()
    assert created == 2 and again == 0
    assert parts >= 5  # yesterday, today, tomorrow, the two above, and the default partition


@pytest.mark.db
def test_embedded_cluster_is_reused_and_reports_its_url(test_env, monkeypatch):
    if test_env["external"]:
        pytest.skip("an external STREAMOPS_DATABASE_URL is in use, not the embedded cluster")
    # The cluster `make test` started is recorded in the real state dir, not the tests' temp home.
    monkeypatch.delenv("STREAMOPS_DATABASE_URL")
    if test_env["old_env"]["STREAMOPS_HOME"]:
        monkeypatch.setenv("STREAMOPS_HOME", test_env["old_env"]["STREAMOPS_HOME"])
    else:
        monkeypatch.delenv("STREAMOPS_HOME")
    record = embedded.load_record()
    assert record is not None
    cluster, reused = embedded.up()
    assert reused and cluster.port == record.port
    out = subprocess.run([".venv/bin/streamops", "db", "status"], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    assert out.returncode == 0, out.stderr
    assert f"postgresql://postgres@127.0.0.1:{cluster.port}/streamops" in out.stdout
    with create_engine(db.sqlalchemy_url(cluster.url("airflow"))).connect() as conn:
        assert conn.execute(text("SELECT current_database()")).scalar_one() == "airflow"


@pytest.mark.db
def test_the_embedded_server_acknowledges_a_commit_once_its_wal_is_on_disk(test_env, engine):
    """The cluster ran with synchronous_commit=off: a crash of the server (one backend SIGKILLed
    is enough) lost commits it had acknowledged, 5 to 33 in each of six crashes in
    bench/synchronous_commit.py. Now every transaction waits for its WAL, but the metrics' and
    heartbeats' (`durable=False`), whose loss breaks no guarantee; SET LOCAL, so the pooled
    connection's next transaction waits again."""
    if test_env["external"]:
        pytest.skip("an external STREAMOPS_DATABASE_URL is in use: its synchronous_commit is its operator's")
    setting = lambda conn: conn.execute(db.query("synchronous_commit")).scalar_one()  # noqa: E731
    with db.connection(engine) as conn:
        assert setting(conn) == "on", "restart a cluster started before this: streamops db down; streamops db up"
    with db.transaction(engine, durable=False) as conn:
        assert setting(conn) == "off"
    with db.transaction(engine) as conn:
        assert setting(conn) == "on"


def test_missing_server_binaries_say_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setattr(embedded, "PG_ROOT", tmp_path)
    monkeypatch.delenv("STREAMOPS_PG_BIN", raising=False)
    monkeypatch.setattr(embedded.shutil, "which", lambda _: None)
    with pytest.raises(embedded.EmbeddedPgError) as e:
        embedded.find_bindir()
    assert "apt-get install postgresql" in str(e.value) and "STREAMOPS_DATABASE_URL" in str(e.value)


@pytest.mark.db
def test_embedded_cluster_comes_back_on_its_recorded_port(monkeypatch):
    """`db down` then `db up` with connections just closed (TIME_WAIT on the server's port): the
    cluster restarts on the port every client holds. It once moved to a new port, and the
    drivers, the supervisor and Airflow were refused from then on."""
    home = Path(os.environ["STREAMOPS_HOME"]) / "pg-same-port"  # a private cluster, readable by its owner
    home.mkdir(mode=0o755)
    monkeypatch.setenv("STREAMOPS_HOME", str(home))
    monkeypatch.delenv("STREAMOPS_DATABASE_URL", raising=False)
    cluster, _ = embedded.up()
    try:
        for _ in range(5):
            conn = psycopg2.connect(cluster.url("postgres"))
            conn.cursor().execute("SELECT 1")
            conn.close()
        embedded.down()
        again, reused = embedded.up()
        assert not reused and again.port == cluster.port == embedded.load_record().port
        psycopg2.connect(cluster.url("postgres")).close()
    finally:
        embedded.down()


@pytest.fixture
def private_cluster(monkeypatch):
    """An embedded cluster of this test's own (its home a subdirectory of the session's)."""
    home = Path(os.environ["STREAMOPS_HOME"]) / f"pg-private-{os.getpid()}-{time.monotonic_ns()}"
    home.mkdir(mode=0o755)
    monkeypatch.setenv("STREAMOPS_HOME", str(home))
    monkeypatch.delenv("STREAMOPS_DATABASE_URL", raising=False)
    db.engine.cache_clear()
    try:
        yield embedded.up()[0]
    finally:
        embedded.down()
        db.engine.cache_clear()


def _refused(url: str) -> str:
    with pytest.raises(psycopg2.OperationalError) as e:
        psycopg2.connect(url, connect_timeout=5).close()
    return str(e.value)


def _as_reader_login(cluster, sql: str):
    conn = psycopg2.connect(cluster.url("streamops", role=roles.READER))
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall()
    finally:
        conn.close()


@pytest.mark.db
def test_the_embedded_cluster_takes_scram_passwords_from_a_private_file_and_the_reader_reads_only_reporting(
        private_cluster):
    """Issue 25: `initdb -A trust` made any local user the superuser, and the reader role's limits
    meant nothing. Now every role logs in with a scram password kept in a 0600 file."""
    c = private_cluster
    assert c.passfile and os.stat(c.passfile).st_mode & 0o777 == 0o600
    pw = embedded.passwords(c)
    assert set(pw) == {embedded.SUPERUSER, *roles.LOGIN_ROLES} and all(len(p) >= 24 for p in pw.values())
    assert all(p not in c.url() for p in pw.values()), "no password in a URL"
    bare = f"postgresql://{embedded.SUPERUSER}@127.0.0.1:{c.port}/streamops"
    assert "password" in _refused(bare + "?passfile=/nonexistent"), "no password, no login"
    with psycopg2.connect(c.url("postgres")) as conn, conn.cursor() as cur:
        cur.execute("SELECT rolname FROM pg_authid WHERE rolpassword LIKE 'SCRAM-SHA-256$%' ORDER BY 1")
        assert [r[0] for r in cur.fetchall()] == sorted([embedded.SUPERUSER, *roles.LOGIN_ROLES])

    migrate.apply(db.engine())
    assert _as_reader_login(c, "SELECT count(*) FROM reporting.sla_daily") == [(0,)]
    for raw in ("public.stage_metrics", "public.apps", "public.sink_outputs"):
        with pytest.raises(psycopg2.Error, match="permission denied"):
            _as_reader_login(c, f"SELECT * FROM {raw} LIMIT 1")
    with pytest.raises(psycopg2.Error, match="permission denied"):
        _as_reader_login(c, "CREATE TABLE public.mine (x int)")

    out = subprocess.run([".venv/bin/streamops", "db", "status"], capture_output=True, text=True,
                         env={**os.environ, "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert all(p not in out.stdout for p in pw.values()) and "passfile=" in out.stdout


@pytest.mark.db
def test_a_running_cluster_from_before_the_component_roles_gets_them_at_its_next_up(private_cluster):
    """Issue 44: a password file with only the superuser and the reader gains the observer's and
    Airflow's at `db up` (the cluster keeps running), and `airflow` becomes Airflow's role's."""
    c = private_cluster
    kept = {r: p for r, p in embedded.passwords(c).items() if r in (embedded.SUPERUSER, roles.READER)}
    Path(c.passfile).write_text("".join(roles.passfile_line(r, p) for r, p in kept.items()))
    with psycopg2.connect(c.url("postgres")) as conn, conn.cursor() as cur:
        conn.autocommit = True
        cur.execute("ALTER DATABASE airflow OWNER TO postgres")
        cur.execute("DROP ROLE streamops_observer")  # the test has not migrated: no grant holds it
    again, reused = embedded.up()
    assert reused and os.stat(again.passfile).st_mode & 0o777 == 0o600
    pw = embedded.passwords(again)
    assert {r: pw[r] for r in kept} == kept and set(pw) == {embedded.SUPERUSER, *roles.LOGIN_ROLES}
    for role, database in ((roles.OBSERVER, "streamops"), (roles.AIRFLOW, "airflow")):
        with psycopg2.connect(again.url(database, role=role)) as conn, conn.cursor() as cur:
            cur.execute("SELECT current_user, pg_get_userbyid(datdba) FROM pg_database "
                        "WHERE datname = current_database()")
            assert cur.fetchone() == (role, roles.AIRFLOW if database == "airflow" else embedded.SUPERUSER)


@pytest.mark.db
def test_a_trust_cluster_from_before_passwords_is_converted_at_its_next_up(private_cluster):
    c = private_cluster
    before = embedded.passwords(c)
    # Put it back as clusters were made before: pg_hba `trust`, and a record without a password file.
    hba = Path(c.datadir) / "pg_hba.conf"
    hba.write_text(hba.read_text().replace("scram-sha-256", "trust"))
    embedded._pg_ctl(c, "reload")
    old = embedded.Cluster(c.bindir, c.datadir, c.port, c.run_as)
    embedded._save_record(old)
    Path(c.passfile).unlink()
    bare = old.url("postgres")
    psycopg2.connect(bare).close()  # trust: anyone gets in

    embedded.down()
    again, reused = embedded.up()
    assert not reused and again.port == c.port and again.passfile
    assert embedded.passwords(again) != before, "new passwords"
    assert "password" in _refused(bare + "?passfile=/nonexistent"), "trust is gone"
    psycopg2.connect(again.url("postgres")).close()
    assert "trust" not in "".join(ln for ln in hba.read_text().splitlines() if not ln.lstrip().startswith("#"))
    assert _as_reader_login(again, "SELECT current_user") == [(roles.READER,)]


@pytest.mark.db
def test_a_deploy_s_replica_count_outlives_every_later_registry_sync(clean_db):
    """The deploy DAG's `replicas` Param was undone by start_stage's own sync of apps.yaml, and
    again on each failover. It holds until the next deploy without it."""
    from streamops import registry
    from streamops.execute import stages

    reg = registry.parse({"pools": {"p": {"cores": 2}}, "apps": {"r": {
        "r_max_ms": 1000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
        "stages": {"s": {**demo_job("wordcount", {"kind": "files", "path": "r/s"}), "pool": "p",
                         "cores": {"initial": 1, "max": 2}}}}}})

    def wanted() -> tuple:
        with clean_db.connect() as conn:
            return tuple(conn.execute(text("SELECT replicas, replicas_override FROM stages "
                                           "WHERE stage_id = 'r.s'")).one())

    stages.sync_registry(reg, ["r"], replicas_override=2, set_override=True)  # the deploy
    stages.sync_registry(reg)  # a start, a failover
    assert wanted() == (2, 2)
    stages.sync_registry(reg, ["r"], set_override=True)  # a deploy without the Param: apps.yaml's again
    assert wanted() == (1, None)


def _two_runs(conn, t0, second_status: str) -> tuple[int, int]:
    """Stage r.s's run that failed at `t0`, and its restart 30 s later, in `second_status`."""
    from datetime import timedelta

    return tuple(conn.execute(text(
        "INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, status, "
        "started_at) VALUES ('r.s', 'p', 1, 2, '{}', 'local', '/c', :st, :at) RETURNING id"),
        {"st": st, "at": at}).scalar_one() for st, at in (("failed", t0), (second_status, t0 + timedelta(seconds=30))))


@pytest.mark.db
def test_a_failure_whose_restart_committed_late_is_closed_at_that_commit(clean_db):
    """The recovery stopped waiting (its restart's first output came after `wait_s`): the failure
    stayed `recovering` forever and the report counted the stage as down from then on."""
    from datetime import datetime, timedelta

    from streamops.execute import watchdog

    test_a_deploy_s_replica_count_outlives_every_later_registry_sync(clean_db)  # stage r.s, registered
    t0 = datetime.now(UTC) - timedelta(minutes=10)
    with clean_db.begin() as conn:
        old, new = _two_runs(conn, t0, "running")
        conn.execute(text("INSERT INTO failures (stage_id, app, deployment_id, kind, detail, failed_at, "
                          "last_commit_at) VALUES ('r.s', 'r', :d, 'dead_pid', 'x', :f, :c)"),
                     {"d": old, "f": t0, "c": t0 - timedelta(seconds=2)})
        conn.execute(text("INSERT INTO sink_commits (stage_id, deployment_id, batch_id, rows, committed_at) "
                          "VALUES ('r.s', :d, 5, 10, :at)"), {"d": new, "at": t0 + timedelta(seconds=200)})
    watchdog.close_late_failures()
    with clean_db.connect() as conn:
        f = conn.execute(text("SELECT status, mttr_ms, downtime_ms, recovery_deployment_id FROM failures")).one()
    assert f.status == "recovered" and f.recovery_deployment_id == new
    assert round(f.mttr_ms) == 200_000 and round(f.downtime_ms) == 202_000


@pytest.mark.db
def test_a_second_fault_after_a_committed_restart_is_a_failure_of_its_own(clean_db):
    """Issue 31: two faults of one stage were merged into one failure with an MTTR of 397 s: the
    first was still open (its restart committed after the recovery stopped waiting) when the
    restarted run died too. The first is closed at its restart's first commit, and the second
    fault opens a failure of its own."""
    from datetime import datetime, timedelta

    from streamops.store import failures

    test_a_deploy_s_replica_count_outlives_every_later_registry_sync(clean_db)  # stage r.s, registered
    t0 = datetime.now(UTC) - timedelta(minutes=10)
    with clean_db.begin() as conn:
        old, new = _two_runs(conn, t0, "failed")
        conn.execute(text("INSERT INTO sink_commits (stage_id, deployment_id, batch_id, rows, committed_at) "
                          "VALUES ('r.s', :d, 5, 10, :at)"), {"d": new, "at": t0 + timedelta(seconds=40)})
    first, _, created = failures.open_failure("r.s", "r", old, "dead_pid", "one", t0)
    assert created
    second, attempts, created = failures.open_failure("r.s", "r", new, "dead_pid", "two", t0 + timedelta(minutes=5))
    assert created and second != first and attempts == 0, "a failure of its own"
    with clean_db.connect() as conn:
        rows = conn.execute(text("SELECT id, status, mttr_ms FROM failures ORDER BY id")).all()
    assert [(r.id, r.status) for r in rows] == [(first, "recovered"), (second, "recovering")]
    assert round(rows[0].mttr_ms) == 40_000, "closed at its restart's first commit"

    # A restart that never committed and dies: the same failure, one more attempt.
    again, _, created = failures.open_failure("r.s", "r", new, "dead_pid", "three", t0 + timedelta(minutes=6))
    assert again == second and not created


@pytest.mark.db
def test_a_stale_run_s_commit_is_refused_and_a_replay_of_the_current_run_s_is_not(clean_db):
    from streamops.store import db as store

    test_a_deploy_s_replica_count_outlives_every_later_registry_sync(clean_db)  # stage r.s, registered
    with clean_db.begin() as conn:
        old, new = [conn.execute(text(
            "INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, status) "
            "VALUES ('r.s', 'p', 1, 2, '{}', 'local', '/c', :st) RETURNING id"), {"st": st}).scalar_one()
            for st in ("failed", "running")]

    def commit(dep: int):
        return store.write("sink_commit", stage_id="r.s", deployment_id=dep, batch_id=7, rows=3)
    assert commit(old) is None, "the replaced run is fenced"
    assert commit(new) is not None and commit(new) is not None, "a replay by the current run is not a fence"
    assert store.value("run_is_current", deployment_id=old) is False
    assert store.value("run_is_current", deployment_id=None) is True


@pytest.mark.db
def test_a_run_whose_row_retention_pruned_stays_fenced(clean_db):
    """runs_retention deletes the row of a run replaced long ago; a driver of that run that wakes
    after that (paused past keep_days) is still stale, while a run id with no row ever (a test's
    or a tool's own) is not."""
    from streamops.store import db as store

    test_a_deploy_s_replica_count_outlives_every_later_registry_sync(clean_db)  # stage r.s, registered
    with clean_db.begin() as conn:
        old, new = [conn.execute(text(
            "INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, status, "
            "started_at, stopped_at) VALUES ('r.s', 'p', 1, 2, '{}', 'local', '/c', :st, now() - interval '30 days', "
            "CASE WHEN :st = 'stopped' THEN now() - interval '20 days' END) RETURNING id"), {"st": st}).scalar_one()
            for st in ("stopped", "running")]
        pruned = dict(conn.execute(text("SELECT target, deleted FROM runs_retention(8)")).all())
        assert conn.execute(text("SELECT count(*) FROM deployments WHERE id = :d"), {"d": old}).scalar_one() == 0
    assert pruned["deployments"] >= 1, pruned
    assert store.value("run_is_current", deployment_id=old) is False, "a pruned run woke up current"
    assert store.write("sink_commit", stage_id="r.s", deployment_id=old, batch_id=7, rows=3) is None
    assert store.value("run_is_current", deployment_id=new) is True
    never = new + 10_000
    assert store.value("run_is_current", deployment_id=never) is True, "a run id with no row ever is not fenced"


@pytest.mark.db
def test_a_batch_reaches_the_sink_whole_with_its_commit_or_not_at_all(clean_db):
    """The sink's apply (staged rows → sink_outputs, plus the commit row, in one transaction):
    applied whole by the current run; by a fenced run, nothing; with staged rows missing (an
    unlogged table a crash emptied), nothing, and a transient error so the batch is written again.
    A failed try's staged rows never reach the sink, so its counts cannot outrank the replay's."""
    from streamops.agent.errors import TransientError, is_transient
    from streamops.agent.sinks import PostgresUpsertSink, _execute_values_partition
    from streamops.store import db as store

    test_a_deploy_s_replica_count_outlives_every_later_registry_sync(clean_db)  # stage r.s, registered
    with clean_db.begin() as conn:
        old, new = [conn.execute(text(
            "INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, status) "
            "VALUES ('r.s', 'p', 1, 2, '{}', 'local', '/c', :st) RETURNING id"), {"st": st}).scalar_one()
            for st in ("failed", "running")]

    def stage(dep: int, batch_id: int, counts: dict[str, int]) -> int:
        rows = [("r.s", dep, batch_id, k, f'{{"count": {c}}}', None, c) for k, c in counts.items()]
        _execute_values_partition(store.libpq_url(store.database_url()), store.query("sink_stage").text,
                                  "(%s, %s, %s, %s, %s::jsonb, %s, %s)", lambda t: t, conflict_key=lambda t: t[3])(rows)
        return len(rows)

    def sink() -> dict[str, float]:
        with clean_db.connect() as conn:
            return dict(conn.execute(text("SELECT key, version FROM sink_outputs WHERE stage_id = 'r.s'")).all())

    def commits(dep: int) -> int:
        with clean_db.connect() as conn:
            return conn.execute(text("SELECT count(*) FROM sink_commits WHERE deployment_id = :d"),
                                {"d": dep}).scalar_one()

    # A failed try of batch 3 staged inflated counts and never applied them; the replay applies its own.
    stage(new, 3, {"a": 9, "b": 9})
    with clean_db.begin() as conn:
        conn.execute(store.query("sink_staged_clear"), {"stage_id": "r.s", "deployment_id": new, "batch_id": 3})
    n = stage(new, 3, {"a": 2, "b": 1})
    assert PostgresUpsertSink("r.s", new).apply_and_commit(3, n, n) is not None
    assert sink() == {"a": 2, "b": 1} and commits(new) == 1

    stage(old, 4, {"a": 5, "c": 5})
    assert PostgresUpsertSink("r.s", old).apply_and_commit(4, 2, 2) is None, "the replaced run is fenced"
    assert sink() == {"a": 2, "b": 1} and commits(old) == 0, "the fenced run's batch left nothing"

    stage(new, 4, {"a": 3})
    with pytest.raises(TransientError) as lost:
        PostgresUpsertSink("r.s", new).apply_and_commit(4, 2, 2)
    assert is_transient(lost.value) and sink() == {"a": 2, "b": 1} and commits(new) == 1


# -- db.bulk: rows by field name ------------------------------------------------------------------
def _bulk_queries() -> list[str]:
    return sorted(p.stem for p in (Path(db.__file__).parents[3] / "sql" / "queries").glob("*.sql")
                  if "%(" in p.read_text() and " VALUES " in p.read_text().replace("\n", " ").upper() + " ")


@pytest.mark.parametrize("name", _bulk_queries())
def test_every_bulk_query_has_one_named_values_row(name):
    sql, template, names = db.bulk_statement(name)
    assert sql.count("%s") == 1 and "%(" not in sql, sql
    assert template.startswith("(") and template.endswith(")") and names


def test_bulk_names_the_field_a_row_lacks_and_refuses_positional_rows():
    with pytest.raises(ValueError, match=r"row 1 lacks last_response_ms, tokens"):
        db.bulk("app_controls_save", [
            {"app": "a", "tokens": 1.0, "window_start": None, "window_actions": 0, "last_cycle_at": None,
             "last_response_ms": None},
            {"app": "b", "window_start": None, "window_actions": 0, "last_cycle_at": None}])
    with pytest.raises(TypeError, match="named fields"):
        db.bulk("app_controls_save", [("a", 1.0, None, 0, None, None)])
    with pytest.raises(ValueError, match="named placeholders"):  # a `:name` statement
        db.bulk("app_upsert", [{}])


@pytest.mark.db
def test_bulk_writes_dicts_dataclasses_and_named_tuples_by_field_and_returns_rows_in_order(clean_db):
    from dataclasses import dataclass
    from datetime import datetime
    from typing import NamedTuple

    @dataclass
    class Control:  # fields in another order than the VALUES row, and one it does not use
        last_response_ms: float | None
        app: str
        tokens: float
        window_actions: int
        window_start: datetime | None = None
        last_cycle_at: datetime | None = None
        unused: str = "ignored"

    class ControlTuple(NamedTuple):
        tokens: float
        app: str
        window_actions: int
        last_cycle_at: datetime | None
        window_start: datetime | None
        last_response_ms: float | None

    now = datetime(2026, 1, 1, tzinfo=UTC)
    from streamops.store import ledger

    ledger.sync_catalog([], [{"name": app, "r_max_ms": 1000, "maintenance_window": "{}", "spec": "{}"}
                             for app in ("a", "b", "c")], [])
    db.bulk("app_controls_save", [
        {"window_actions": 1, "app": "a", "tokens": 1.5, "window_start": now, "last_cycle_at": now,
         "last_response_ms": 10.0},
        Control(20.0, "b", 2.5, 2),
        ControlTuple(3.5, "c", 3, now, None, None)])
    got = {r.app: tuple(r[1:]) for r in db_rows(clean_db, "SELECT app, tokens, window_actions, last_response_ms "
                                                           "FROM app_control ORDER BY app")}
    assert got == {"a": (1.5, 1, 10.0), "b": (2.5, 2, 20.0), "c": (3.5, 3, None)}

    ids = [r[0] for r in db.bulk("decisions_insert", [
        {"app": app, "request_id": None, "stage_id": f"{app}.s", "action": "scale_out", "outcome": "declined",
         "reason": app, "policy": "accept_all", "tokens_before": 1.0, "tokens_after": 1.0, "defer_until": None,
         "urgent": False, "response_ms": None, "dry_run": True, "decided_by": "test"} for app in ("c", "a", "b")],
        page_size=2)]  # two pages: RETURNING rows still come back in the order of the rows
    reasons = dict(db_rows(clean_db, "SELECT id, reason FROM decisions"))
    assert [reasons[i] for i in ids] == ["c", "a", "b"]


def db_rows(eng, sql: str) -> list:
    with eng.connect() as conn:
        return conn.execute(text(sql)).all()


@pytest.mark.db
def test_the_embedded_cluster_opens_to_a_network_when_asked_and_closes_again(private_cluster, monkeypatch):
    """STREAMOPS_PG_LISTEN (docs/cluster.md): the cluster listens on the address too and lets its
    network in with the same passwords. 127.0.0.2 stands in for a host address (all of 127/8 is
    this machine's loopback); tests/system/test_multihost.py uses a real bridge."""
    c = private_cluster
    monkeypatch.setenv(embedded.LISTEN_ENV, "not-an-address")
    with pytest.raises(embedded.EmbeddedPgError, match="not an address with a network"):
        embedded.listen_interface()
    monkeypatch.setenv(embedded.LISTEN_ENV, "127.0.0.2/8")
    with pytest.raises(embedded.EmbeddedPgError, match="streamops db down"):
        embedded.up()  # running without it: listen_addresses is read at start only
    # A password file from before names 127.0.0.1: libpq would not use it for another address.
    passfile = Path(c.passfile)
    passfile.write_text("".join(f"127.0.0.1{line[1:]}\n" for line in passfile.read_text().splitlines()))
    embedded.down()
    opened, _ = embedded.up()
    psycopg2.connect(opened.url("postgres", host="127.0.0.2"), connect_timeout=5).close()
    assert all(line.startswith("*:") for line in passfile.read_text().splitlines())
    assert os.stat(passfile).st_mode & 0o777 == 0o600

    monkeypatch.delenv(embedded.LISTEN_ENV)
    embedded.down()
    closed, _ = embedded.up()
    assert "127.0.0.0/8" not in (Path(closed.datadir) / "pg_hba.conf").read_text()
    assert "refused" in _refused(closed.url("postgres", host="127.0.0.2"))
    psycopg2.connect(closed.url("postgres")).close()
