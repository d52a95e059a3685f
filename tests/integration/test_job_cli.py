"""A team's first job (issue 43 item 7): `streamops job new` writes one that runs, and `job check`
and `deploy` refuse a broken one with the team's file and line, before anything is started."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from typer.testing import CliRunner

from streamops import registry
from streamops.cli import app

runner = CliRunner()


def test_job_new_writes_a_job_its_test_and_a_registry_entry_that_parses(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["job", "new", "sessions", "--dir", "jobs"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "jobs" / "sessions" / "job.py").exists()
    entry = yaml.safe_load((tmp_path / "jobs" / "sessions" / "apps.yaml.example").read_text().replace("POOL", "p"))
    reg = registry.parse({"code": ["jobs"], "pools": {"p": {"cores": 2}}, "apps": entry}, base=tmp_path)
    st = reg.stage("sessions.sessions")[2]
    assert st.job == "sessions.job:build" and st.code == [str(tmp_path / "jobs")]
    again = runner.invoke(app, ["job", "new", "sessions", "--dir", "jobs"])
    assert again.exit_code == 2 and "exists" in again.output
    assert runner.invoke(app, ["job", "new", "Bad-Name"]).exit_code == 2
    # The job's own test, as the team runs it: a local Spark over three records.
    test = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "jobs/tests"],
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path / "jobs")},
                          capture_output=True, text=True, timeout=300)
    assert test.returncode == 0, test.stdout[-2000:] + test.stderr[-2000:]


@pytest.fixture
def broken_registry(tmp_path, monkeypatch):
    (tmp_path / "jobs" / "teamjob").mkdir(parents=True)
    (tmp_path / "jobs" / "teamjob" / "__init__.py").write_text("")
    (tmp_path / "jobs" / "teamjob" / "job.py").write_text(
        "from pyspark.sql import functions as F\n\n\nWINDOW = Fx.window\n\n\ndef build(records, params):\n"
        "    return records\n")
    apps = tmp_path / "apps.yaml"
    apps.write_text(yaml.safe_dump({
        "code": ["jobs"], "pools": {"p": {"cores": 2}},
        "apps": {"team": {"r_max_ms": 5000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                          "stages": {"s": {"job": "teamjob.job:build", "cores": {"initial": 1, "max": 1},
                                           "pool": "p", "source": {"path": "team/in", "schema": "user STRING"}}}}}}))
    monkeypatch.setenv("STREAMOPS_APPS", str(apps))
    return tmp_path / "jobs" / "teamjob" / "job.py"


def test_job_check_names_the_teams_file_and_line(broken_registry):
    result = runner.invoke(app, ["job", "check", "team.s"])
    assert result.exit_code == 1, result.output
    error = "".join(result.output.split("error:", 1)[1].split())
    assert "NameError:name'Fx'isnotdefined" in error and f"{broken_registry}:4)" in error, result.output


@pytest.mark.db
def test_deploy_refuses_a_job_that_fails_its_check_and_syncs_nothing(broken_registry, clean_db):
    from sqlalchemy import text

    result = runner.invoke(app, ["deploy", "team"])
    assert result.exit_code == 2 and "fails its check; nothing was deployed" in result.output, result.output
    with clean_db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM stages WHERE app = 'team'")).scalar_one() == 0


def test_job_check_runs_a_job_whose_python_udf_its_workers_import(monkeypatch, tmp_path):
    """The check ships the job's code to its Python workers as a driver does (the clicks fixture's
    section is a module-level UDF, which a worker imports by name)."""
    from streamops.paths import REPO_ROOT

    apps = tmp_path / "apps.yaml"
    apps.write_text(yaml.safe_dump({
        "code": [str(REPO_ROOT / "tests" / "fixtures" / "jobs" / "clicks_team")], "pools": {"p": {"cores": 2}},
        "apps": {"team": {"r_max_ms": 5000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                          "stages": {"s": {"job": "clicks.clean:build", "cores": {"initial": 1, "max": 1},
                                           "pool": "p", "params": {"site": "s"},
                                           "source": {"path": str(tmp_path / "in"),
                                                      "schema": "user STRING, url STRING, ts TIMESTAMP"}}}}}}))
    monkeypatch.setenv("STREAMOPS_APPS", str(apps))
    result = runner.invoke(app, ["job", "check", "team.s", "--sample", "50"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "section string" in text and "stateful │ no" in text, text
