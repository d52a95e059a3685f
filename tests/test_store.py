"""Embedded PostgreSQL and schema migrations, against the real server."""

from __future__ import annotations

import os
import subprocess

import pytest
from sqlalchemy import create_engine, inspect, text

from streamops.store import db, embedded, migrate
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


def test_missing_server_binaries_say_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setattr(embedded, "PG_ROOT", tmp_path)
    monkeypatch.delenv("STREAMOPS_PG_BIN", raising=False)
    monkeypatch.setattr(embedded.shutil, "which", lambda _: None)
    with pytest.raises(embedded.EmbeddedPgError) as e:
        embedded.find_bindir()
    assert "apt-get install postgresql" in str(e.value) and "STREAMOPS_DATABASE_URL" in str(e.value)


def test_a_plan_without_a_mechanism_gets_the_smallest_outage_the_resources_allow():
    from streamops.plan.mechanism import choose_mechanism

    pick = lambda *a, **k: choose_mechanism(*a, **k)[0]  # noqa: E731
    assert pick("scale_out", 2, 2, staged_ready=True) == "active_backup", "room beside the old run: overlap"
    assert pick("migrate", 1, 1, staged_ready=False) == "active_backup"
    assert pick("scale_out", 2, 1, staged_ready=True) == "prestaged", "no room, but a staged copy"
    assert pick("scale_out", 2, 1, staged_ready=False) == "pause_resume"
    assert pick("scale_in", 1, 4, staged_ready=True) == "pause_resume", "scale-ins wait for the window anyway"
    assert pick("scale_out", 2, 4, staged_ready=True, running=False) == "pause_resume"
    assert "1 free cores < 2" in choose_mechanism("scale_out", 2, 1, staged_ready=False)[1]


def test_a_staged_copy_serves_only_the_live_run_and_only_while_it_is_recent():
    from streamops.plan.mechanism import staged_copy_stale

    live = "/ckpt/taxi.top10"
    assert staged_copy_stale(live, 68, live, 90, max_lag=30) is None
    assert staged_copy_stale(live, 68, live, None, max_lag=30) is None, "no commit yet: nothing to replay"
    # The demo's case: a copy staged in an earlier session, 432 batches ago, replayed for minutes.
    assert "432 batches behind" in staged_copy_stale(live, 68, live, 500, max_lag=30)
    assert "now runs from" in staged_copy_stale(live, 68, "/ckpt/taxi.top10.staged-1", 70)
