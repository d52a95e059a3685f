"""Least privilege (issue 44 item 11): the Streams page, `/metrics` and `streamops status` read
as `streamops_observer`, which may read what they show and write nothing; Airflow's metadata is
`streamops_airflow`'s, which owns its database and reads none of the platform's tables.

The observer's sessions are read-only too (observe.connect_args), but a session may lift that
itself: each write below first does, so what refuses it is the role's privileges."""

from __future__ import annotations

import os
from datetime import UTC
from urllib.parse import urlsplit

import pytest
from sqlalchemy import text
from sqlalchemy.exc import ProgrammingError

from streamops.store import db, observe, roles

pytestmark = pytest.mark.db

WRITES = {
    "insert": "INSERT INTO apps (name, r_max_ms, maintenance_window, spec) VALUES ('intruder', 1, '{}', '{}')",
    "update": "UPDATE deployments SET status = 'stopped'",
    "delete": "DELETE FROM failures",
    "create": "CREATE TABLE public.intruder (x int)",
    "retention": "SELECT runs_retention(30)",
}


@pytest.fixture
def seeded(clean_db):
    """One app with a running stage, a batch and a failure: something for every read to show."""
    with clean_db.begin() as conn:
        conn.execute(text("TRUNCATE failures CASCADE"))
        conn.execute(text("INSERT INTO pools (name, master, cores) VALUES ('p', 'local', 4)"))
        conn.execute(text("INSERT INTO apps (name, r_max_ms, maintenance_window, spec) VALUES ('a', 1000, '{}', '{}')"))
        conn.execute(text("INSERT INTO stages (stage_id, app, name, job, pool, cores, min_cores, max_cores, "
                          "state_partitions, trigger_ms, spec) VALUES ('a.s', 'a', 's', 'wordcount', 'p', 1, 1, 4, "
                          "4, 1000, '{}')"))
        dep = conn.execute(text(
            "INSERT INTO deployments (stage_id, role, pool, cores, state_partitions, config, launcher, checkpoint, "
            "status, started_at) VALUES ('a.s', 'primary', 'p', 1, 4, '{}', 'local', '/x', 'running', "
            "now() - interval '10 minutes') RETURNING id")).scalar_one()
        conn.execute(text("INSERT INTO stage_metrics (ts, stage_id, deployment_id, run_id, batch_id, input_rows, "
                          "batch_duration_ms, backlog_rows, backlog_files, latency_p95_ms) VALUES "
                          "(now() - interval '30 seconds', 'a.s', :d, 'run', 1, 100, 100, 0, 0, 250)"), {"d": dep})
        conn.execute(text("INSERT INTO failures (stage_id, app, role, kind, detail, failed_at, status, cause) "
                          "VALUES ('a.s', 'a', 'primary', 'dead_pid', 'test', now() - interval '5 minutes', "
                          "'recovering', 'real')"))
    observe._engine.cache_clear()
    yield clean_db
    observe._engine.cache_clear()


def _observer_or_skip() -> None:
    if not roles.names_passfile(db.database_url()) and not os.environ.get(observe.URL_ENV):
        pytest.skip("the server's URL names no password file and STREAMOPS_OBSERVE_DATABASE_URL is unset: "
                    "observe reads with the platform's own role there (docs/architecture.md)")


def test_the_observer_is_its_own_role_and_no_superuser(seeded):
    _observer_or_skip()
    with db.connection(observe.engine()) as conn:
        who = conn.execute(text("SELECT current_user, rolsuper, rolcreaterole, rolcreatedb FROM pg_roles "
                                "WHERE rolname = current_user")).one()
    assert tuple(who) == (roles.OBSERVER, False, False, False)


@pytest.mark.parametrize("kind", sorted(WRITES))
@pytest.mark.parametrize("reader", ["exporter", "page"])
def test_the_observer_cannot_write_even_when_its_session_allows_it(seeded, kind, reader):
    _observer_or_skip()
    with db.connection(observe.engine() if reader == "exporter" else observe.page_engine()) as conn:
        conn.execute(text("SET TRANSACTION READ WRITE"))
        with pytest.raises(ProgrammingError) as refused:
            conn.execute(text(WRITES[kind]))
    assert refused.value.orig.pgcode == "42501", refused.value  # insufficient_privilege
    with db.connection(seeded) as conn:
        assert conn.execute(text("SELECT count(*) FROM apps WHERE name = 'intruder'")).scalar() == 0
        assert conn.execute(text("SELECT status FROM deployments")).scalar() == "running"


def test_the_page_and_the_exporter_read_their_rows_as_the_observer(seeded, monkeypatch):
    _observer_or_skip()
    from streamops.report import nightly, prometheus
    from streamops.ui import views

    def platform_engine(*_a, **_k):
        raise AssertionError("the page read through the platform's own engine")

    for helper in ("rows", "row", "value"):  # the process engine's: the page's reads before
        monkeypatch.setattr(db, helper, platform_engine)
    with db.connection(observe.page_engine()) as conn:
        assert conn.execute(text("SELECT current_user")).scalar() == roles.OBSERVER
    (app,) = views.streams()
    assert app.app == "a" and [s.status["stage_id"] for s in app.stages] == ["a.s"]
    assert app.failures_open == 1 and app.stages[0].last_failure["kind"] == "dead_pid"
    assert views.r_max_ms() == {"a": 1000} and list(views.response_series()) == ["a"]
    assert views.report_row(1) is None and nightly.last_report(observe.page_engine()) is None
    snapshot = prometheus.read(prometheus.start_of_utc_day())
    assert [(r.app, r.stage) for r in snapshot.runs] == [("a", "s")] and snapshot.failures
    families = {f.name: f for f in prometheus.families(snapshot)}
    assert families["streamops_stage_running"].samples[0].value == 1


def test_airflow_metadata_has_a_role_owning_its_database_only(test_env):
    from streamops.orchestrate import airflow_home
    from streamops.store.scratch import drop_database

    site = airflow_home.site(database=f"airflow_priv_{os.getpid()}")
    url = airflow_home.metadata_url(site)
    if not roles.names_passfile(db.database_url()):
        pytest.skip("the server's URL names no password file: Airflow uses the platform's role there")
    airflow_home._ensure_database(site)
    try:
        engine = db.engine(url)
        with engine.begin() as conn:
            who = conn.execute(text("SELECT current_user, rolsuper, rolcreaterole, rolcreatedb, "
                                    "pg_get_userbyid(d.datdba) FROM pg_roles, pg_database d "
                                    "WHERE rolname = current_user AND d.datname = current_database()")).one()
            assert tuple(who) == (roles.AIRFLOW, False, False, False, roles.AIRFLOW)
            conn.execute(text("CREATE TABLE alembic_probe (x int)"))  # `airflow db migrate` creates its tables
        platform = db.engine(db.with_database(url, urlsplit(test_env["url"]).path.lstrip("/")))
        with pytest.raises(ProgrammingError) as refused, db.connection(platform) as conn:
            conn.execute(text("SELECT count(*) FROM deployments"))
        assert refused.value.orig.pgcode == "42501"
        platform.dispose()
        engine.dispose()
    finally:
        drop_database(test_env["server"], site.database)


def test_an_airflow_database_the_superuser_made_is_handed_to_its_role_whole(test_env):
    """Before its role, Airflow's database and its tables were the superuser's: its migrations,
    now run as the role, must still alter them."""
    from streamops.store.scratch import drop_database, recreate_database

    if not roles.names_passfile(test_env["server"]):
        pytest.skip("roles are made from the embedded cluster's password file")
    name = f"airflow_old_{os.getpid()}"
    old = db.engine(recreate_database(test_env["server"], name))
    with old.begin() as conn:
        conn.execute(text("CREATE TYPE state AS ENUM ('up', 'down'); "
                          "CREATE TABLE dag_run (id serial PRIMARY KEY, s state); "
                          "CREATE VIEW runs AS SELECT * FROM dag_run; "
                          "CREATE FUNCTION one() RETURNS int LANGUAGE sql AS 'SELECT 1'"))
    old.dispose()
    try:
        roles.ensure_owned_database(db.with_database(test_env["server"], "postgres"), name, roles.AIRFLOW)
        mine = db.engine(roles.as_role(db.with_database(test_env["server"], name), roles.AIRFLOW))
        with mine.begin() as conn:
            owners = conn.execute(text(
                "SELECT DISTINCT pg_get_userbyid(relowner) FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = relnamespace WHERE nspname = 'public' UNION SELECT pg_get_userbyid(typowner) "
                "FROM pg_type WHERE typname = 'state' UNION SELECT pg_get_userbyid(proowner) FROM pg_proc "
                "WHERE proname = 'one'")).scalars().all()
            assert owners == [roles.AIRFLOW]
            conn.execute(text("ALTER TABLE dag_run ADD COLUMN note text"))  # what a migration does
            conn.execute(text("INSERT INTO dag_run (s) VALUES ('up')"))
        mine.dispose()
    finally:
        drop_database(test_env["server"], name)


def test_the_control_plane_needs_no_superuser_it_migrates_and_writes_as_its_database_s_owner(test_env):
    """Issue 44 item 11: compose's control plane (the scheduler, its tasks and drivers) connects
    as `streamops`, the streamops database's owner and no superuser (docker/postgres-init.sh).
    Every migration and the reporting schema must then apply as such a role, and a stage's fenced
    writes must go through. A superuser's session under SET ROLE has only the role's rights."""
    from datetime import datetime

    from sqlalchemy import create_engine

    from streamops.store import migrate

    owner, name = "streamops_owner_probe", "streamops_owner_probe"
    server = test_env["server"]
    admin = create_engine(db.with_database(server, "postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            conn.execute(text(f"DROP ROLE IF EXISTS {owner}"))
            conn.execute(text(f"CREATE ROLE {owner} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE"))
            conn.execute(text(f"CREATE DATABASE {name} OWNER {owner}"))
        probe = create_engine(db.with_database(server, name), connect_args={"options": f"-c role={owner}"})
        try:
            with probe.connect() as conn:
                assert conn.execute(text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")).scalar() \
                    is False
            assert migrate.apply(probe), "no migration applied"
            with probe.begin() as conn:
                conn.execute(text("INSERT INTO pools (name, master, cores) VALUES ('p', 'local', 4)"))
                conn.execute(text("INSERT INTO apps (name, r_max_ms, maintenance_window, spec) "
                                  "VALUES ('a', 1000, '{}', '{}')"))
                conn.execute(text("INSERT INTO stages (stage_id, app, name, job, pool, cores, min_cores, max_cores, "
                                  "state_partitions, trigger_ms, spec) VALUES ('a.s', 'a', 's', 'wordcount', 'p', "
                                  "1, 1, 4, 4, 1000, '{}')"))
                dep = conn.execute(text(
                    "INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, "
                    "status) VALUES ('a.s', 'p', 1, 4, '{}', 'local', '/x', 'running') RETURNING id")).scalar_one()
                committed = conn.execute(db.query("sink_commit"), {
                    "stage_id": "a.s", "deployment_id": dep, "batch_id": 1, "rows": 1,
                    "committed_at": datetime.now(UTC)}).first()
                assert committed is not None, "the current run's commit was refused"
                assert conn.execute(text("SELECT count(*) FROM reporting.sla_daily")).scalar() == 0
                conn.execute(text("SELECT runs_retention(30)"))
        finally:
            probe.dispose()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            conn.execute(text(f"DROP ROLE IF EXISTS {owner}"))
        admin.dispose()
