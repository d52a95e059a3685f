"""Shared fixtures: a real PostgreSQL database and a real local Spark session.

Tests never touch the demo's data: every test runs with a temporary STREAMOPS_HOME for checkpoints,
logs and inputs, and the tests marked `db` run against a fresh database `streamops_test_<pid>` on the
same server (`make test` starts the embedded cluster). The database is created lazily, by the first
test that needs it, so `pytest -m "not db"` (`make test-pure`) runs without any PostgreSQL. A test
not marked `db` sees STREAMOPS_DATABASE_URL pointing at a port nothing listens on, so reaching for
the database fails at once instead of using another one. Stage driver processes inherit both
variables through the environment.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path

import psutil
import pytest
from sqlalchemy import text

# Scratch databases come from store/, as bench/'s do; the tests import them from here.
from streamops.store.scratch import drop_database, recreate_database  # noqa: F401

# py4j logs "Closing down clientserver connection" from a finalizer at interpreter exit, after
# pytest closed its log streams: a "--- Logging error ---" traceback at the end of every run.
logging.getLogger("py4j").setLevel(logging.WARNING)

# One database per pytest session, so concurrent sessions (developers, CI) never collide.
TEST_DB = f"streamops_test_{os.getpid()}"
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
# What a test not marked `db` gets as its database: nothing listens on port 1.
UNMARKED_URL = "postgresql://no-database-for-unmarked-tests@127.0.0.1:1/none"
# Every libpq connection of the tests (and of the drivers they start) in UTC, whatever the server's
# TimeZone: the reporting fixtures' days are UTC days.
os.environ["PGTZ"] = "UTC"
# The tests' JVMs (drivers, executors, offline jobs) live for seconds to minutes, where C2's
# compiler threads and G1's cost more CPU than they give back: on these 2 cores the whole suite
# used 39 % less CPU with C1 and the serial collector (README, "make test"). Set it empty to
# run Java's defaults. (The name is spark_apps.stage.JAVA_OPTIONS_ENV, spelled out here so that
# `make test-pure` does not import pyspark to read it.)
os.environ.setdefault("STREAMOPS_SPARK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
# One warm-up round per deploy, not three (spark_apps/run_stage.WARM_UP_ROUNDS): the later rounds
# warm the JIT for a long run's first batches; a test's run lasts seconds, and deploys hundreds.
os.environ.setdefault("STREAMOPS_WARM_UP_ROUNDS", "1")
# The environment as the session found it (the server `make test` brought up, the real state dir).
OUTER_ENV = {k: os.environ.get(k) for k in ("STREAMOPS_DATABASE_URL", "STREAMOPS_HOME")}
_test_db_url: str | None = None  # set once the `test_database` fixture created the database


def _set_env(values: dict[str, str | None]) -> None:
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _point_database_url(url: str) -> None:
    """This process and the drivers it starts use `url`; a cached engine for another URL is dropped."""
    if os.environ.get("STREAMOPS_DATABASE_URL") != url:
        from streamops.store import db

        os.environ["STREAMOPS_DATABASE_URL"] = url
        db.engine.cache_clear()


def _server_url() -> str:
    """The server `make test` brought up: STREAMOPS_DATABASE_URL, else the embedded cluster, as
    the session's outer environment says (the cluster is recorded in the real state dir)."""
    from streamops.store import db

    now = {k: os.environ.get(k) for k in OUTER_ENV}
    _set_env(OUTER_ENV)
    try:
        return db.libpq_url(db.database_url())
    finally:
        _set_env(now)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before any fixture: a `db` test gets the test database (once it exists), any other test the
    unreachable URL; a test asking for a database fixture without the marker is an error."""
    if item.get_closest_marker("db") is None:
        if "test_database" in item.fixturenames:
            pytest.fail(f"{item.nodeid} uses the test database (through its fixtures) but is not marked "
                        "`db`: add @pytest.mark.db (or pytestmark = pytest.mark.db for the module)",
                        pytrace=False)
        _point_database_url(UNMARKED_URL)
    elif _test_db_url is not None:
        _point_database_url(_test_db_url)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Say why an unmarked test could not connect."""
    outcome = yield
    report = outcome.get_result()
    if (report.failed and call.excinfo is not None and item.get_closest_marker("db") is None
            and "port 1 failed" in str(call.excinfo.value)):
        report.sections.append(("streamops: database", f"this test reached for the database but is not marked "
                                f"`db`, so STREAMOPS_DATABASE_URL was {UNMARKED_URL}: add @pytest.mark.db"))


@pytest.fixture(scope="session", autouse=True)
def test_home():
    """Every test (and the drivers it starts) gets a temp home; the database variable is set per test."""
    home = Path(tempfile.mkdtemp(prefix="streamops-test-"))
    os.chmod(home, 0o755)
    os.environ["STREAMOPS_HOME"] = str(home)
    _point_database_url(UNMARKED_URL)
    yield home
    _set_env(OUTER_ENV)


# What a test module may leave running for the next one: nothing it spawned itself. A driver or
# generator left behind writes into the next module's tables (a deadlock with clean_db's TRUNCATE).
STRAY_MARKERS = ("run_stage.py", "streamops.cli")


def _strays() -> list[psutil.Process]:
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if any(m in " ".join(proc.cmdline()) for m in STRAY_MARKERS):
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.fixture(scope="module", autouse=True)
def no_stray_processes(request):
    """Fail the module that leaves a driver, a generator or a supervisor running, after killing it."""
    before = {p.pid for p in _strays()}
    yield
    left = [p for p in _strays() if p.pid not in before]
    if not left:
        return
    _, alive = psutil.wait_procs(left, timeout=5)  # a driver told to stop may still be exiting
    described = []
    for proc in alive:
        try:
            described.append(f"pid {proc.pid}: {' '.join(proc.cmdline())[:160]}")
            proc.kill()
        except psutil.Error:
            continue
    if described:
        pytest.fail(f"{request.module.__name__} left {len(described)} process(es) running (killed now):\n"
                    + "\n".join(described), pytrace=False)


@pytest.fixture(scope="session")
def test_database(test_home):
    """The session's test database, created and migrated on first use, dropped at the end."""
    global _test_db_url
    server = _server_url()
    url = recreate_database(server, TEST_DB)
    from streamops.store import db, migrate

    _test_db_url = url
    _point_database_url(url)
    migrate.apply(db.engine())
    yield {"url": url, "server": server, "home": test_home, "external": bool(OUTER_ENV["STREAMOPS_DATABASE_URL"]),
           "old_env": dict(OUTER_ENV)}
    from streamops.execute.launcher import terminate_all_drivers

    orphans = terminate_all_drivers()  # a failed test must not leave drivers running
    if orphans:
        print(f"\nkilled {len(orphans)} stage driver(s) left running by failed tests: {orphans}")
    db.engine().dispose()
    db.engine.cache_clear()
    drop_database(server, TEST_DB)
    _test_db_url = None
    _point_database_url(UNMARKED_URL)


@pytest.fixture(autouse=True)
def _database_for_db_tests(request):
    """A test marked `db` has the database even when none of its fixtures asks for it."""
    if request.node.get_closest_marker("db") is not None:
        request.getfixturevalue("test_database")


@pytest.fixture(scope="session")
def test_env(test_database):
    """The database's URL and server, the temp home, and the environment the session found."""
    return test_database


@pytest.fixture
def engine(test_env):
    from streamops.store import db

    return db.engine()


TRUNCATE_ALL = text(
    "TRUNCATE pools, apps, stages, deployments, heartbeats, stage_commands, quarantine, requests, decisions, "
    "reconfigurations, app_control, operator_state, stage_metrics, sink_outputs, sink_staging, sink_commits, "
    "slo_budgets, "
    # a pruned id stays fenced: a later test's own run ids (5, 6, …) must not meet an earlier test's
    "deployments_pruned CASCADE")
# Sessions of the test database, other than this one, that are inside a transaction.
BUSY_SESSIONS = text(
    "SELECT pid, application_name, state, left(query, 120) AS query FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL")


@pytest.fixture
def clean_db(engine):
    """Empty every data table (the schema stays). A session an earlier test left writing (a
    driver, a thread) would deadlock the TRUNCATE: it is named on stderr and ended, and the
    TRUNCATE tried again; the module that left it running fails in `no_stray_processes`."""
    from sqlalchemy.exc import OperationalError

    for attempt in range(3):
        try:
            with engine.begin() as conn:
                conn.execute(text("SET LOCAL lock_timeout = '15s'"))
                conn.execute(TRUNCATE_ALL)
            return engine
        except OperationalError as e:  # deadlock_detected or lock_not_available
            if attempt == 2:
                raise
            with engine.begin() as conn:
                busy = conn.execute(BUSY_SESSIONS).all()
                for row in busy:
                    conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": row.pid})
            print(f"\nclean_db: TRUNCATE failed ({type(e.orig).__name__}); ended the sessions left busy: "
                  + "; ".join(f"{r.application_name} [{r.state}] {r.query!r}" for r in busy), file=sys.stderr)
    return engine


@pytest.fixture(scope="session")
def spark(test_env):
    """One local[2] session for every in-process test (the JVM start is the slow part)."""
    from spark_apps.stage import build_session

    session = build_session("streamops-tests", cores=2, state_partitions=2)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_standalone(test_home):
    """A Spark standalone cluster for `embedded` pools: $STREAMOPS_SPARK_MASTER if set, else the
    embedded one (1 worker, 2 cores) started in the session's home on first use, stopped at the end."""
    from streamops import spark_cluster

    if os.environ.get(spark_cluster.ENV_MASTER):
        yield os.environ[spark_cluster.ENV_MASTER]
        return
    cluster, _ = spark_cluster.up(workers=1, cores_per_worker=2, memory_per_worker="4g")
    yield cluster.url
    spark_cluster.down()


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
