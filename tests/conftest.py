"""Shared fixtures: a real PostgreSQL database and a real local Spark session.

Tests never touch the demo's data: they run against a fresh database `streamops_test_<pid>` on the
same server (`make test` starts the embedded cluster) and a temporary STREAMOPS_HOME for
checkpoints, logs and inputs. Stage driver processes inherit both through the environment.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import psycopg2
import pytest
from sqlalchemy import text

# py4j logs "Closing down clientserver connection" from a finalizer at interpreter exit, after
# pytest closed its log streams: a "--- Logging error ---" traceback at the end of every run.
logging.getLogger("py4j").setLevel(logging.WARNING)

# One database per pytest session, so concurrent sessions (developers, CI) never collide.
TEST_DB = f"streamops_test_{os.getpid()}"
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"


def _server_url() -> str:
    """The server `make test` brought up: STREAMOPS_DATABASE_URL, else the embedded cluster."""
    from streamops.store import db

    return db.libpq_url(db.database_url())


def _with_database(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


def recreate_database(url: str, name: str) -> str:
    conn = psycopg2.connect(_with_database(url, "postgres"))
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()
    return _with_database(url, name)


def drop_database(url: str, name: str) -> None:
    conn = psycopg2.connect(_with_database(url, "postgres"))
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    conn.close()


@pytest.fixture(scope="session", autouse=True)
def test_env():
    """Point everything (this process and the drivers it starts) at the test database and a temp home."""
    server = _server_url()
    url = recreate_database(server, TEST_DB)
    home = Path(tempfile.mkdtemp(prefix="streamops-test-"))
    os.chmod(home, 0o755)
    old = {k: os.environ.get(k) for k in ("STREAMOPS_DATABASE_URL", "STREAMOPS_HOME")}
    external = bool(old["STREAMOPS_DATABASE_URL"])
    os.environ["STREAMOPS_DATABASE_URL"] = url
    os.environ["STREAMOPS_HOME"] = str(home)
    from streamops.store import db, migrate

    db.engine.cache_clear()
    migrate.apply(db.engine())
    yield {"url": url, "server": server, "home": home, "external": external, "old_env": old}
    from streamops.execute.launcher import launcher_for

    orphans = launcher_for("local").terminate_all()  # a failed test must not leave drivers running
    if orphans:
        print(f"\nkilled {len(orphans)} stage driver(s) left running by failed tests: {orphans}")
    db.engine().dispose()
    drop_database(server, TEST_DB)
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def engine(test_env):
    from streamops.store import db

    return db.engine()


@pytest.fixture
def clean_db(engine):
    """Empty every data table (the schema stays)."""
    with engine.begin() as conn:
        conn.execute(text(
            "TRUNCATE pools, apps, stages, deployments, heartbeats, stage_commands, quarantine, requests, decisions, "
            "reconfigurations, app_control, operator_state, "
            "stage_metrics, sink_outputs, sink_commits CASCADE"
        ))
    return engine


@pytest.fixture(scope="session")
def spark(test_env):
    """One local[2] session for every in-process test (the JVM start is the slow part)."""
    from spark_apps.stage import build_session

    session = build_session("streamops-tests", cores=2, state_partitions=2)
    yield session
    session.stop()


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
