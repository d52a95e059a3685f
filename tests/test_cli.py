"""The command line as a user meets it: help everywhere, clear errors, the status table."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from streamops.cli import app

runner = CliRunner()
COMMANDS = [[], ["db"], ["db", "up"], ["db", "down"], ["db", "status"], ["deploy"], ["start"], ["stop"],
            ["replan"], ["reconfigure"], ["prestage"], ["release"], ["sim"], ["bench"],
            ["gen"], ["status"], ["report"], ["down"], ["airflow"], ["airflow", "up"], ["airflow", "down"], ["airflow", "status"],
            ["airflow", "logins"], ["airflow", "trigger"]]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "streamops")
def test_help_everywhere(cmd):
    result = runner.invoke(app, [*cmd, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_bad_registry_is_a_clear_error(tmp_path, monkeypatch, clean_db):
    bad = tmp_path / "apps.yaml"
    bad.write_text("pools: {p: {cores: 2}}\napps: {a: {r_max_ms: 0, maintenance_window: {cron: '0 3 * * *', duration_min: 5},"
                   " stages: {s: {workload: identity, source: {path: x}, cores: {initial: 1, max: 1}, pool: p}}}}\n")
    monkeypatch.setenv("STREAMOPS_APPS", str(bad))
    result = runner.invoke(app, ["deploy", "a"])
    assert result.exit_code == 2
    assert "app 'a', field 'r_max_ms': Input should be greater than 0" in result.output


def test_deploy_syncs_and_status_lists_the_stages(clean_db, monkeypatch):
    result = runner.invoke(app, ["deploy", "taxi"])
    assert result.exit_code == 0, result.output
    assert "taxi.top10" in result.output
    result = runner.invoke(app, ["status"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "taxi.top10" in result.output and "never started" in result.output


def test_unknown_stage_and_app_name_the_known_ones(clean_db):
    result = runner.invoke(app, ["stop", "nope"])
    assert result.exit_code == 1 and "known stages: taxi.top10, hibench.wordcount" in result.output
    result = runner.invoke(app, ["deploy", "nope"])
    assert result.exit_code == 2 and "known apps: taxi, hibench" in result.output
    result = runner.invoke(app, ["gen", "taxi.top10", "--trace", "ramp:speed=3"])
    assert result.exit_code == 2 and "unknown param 'speed'" in result.output


def test_status_shows_a_stage_the_watchdog_gave_up_on(clean_db, monkeypatch):
    from sqlalchemy import text

    from streamops.execute import stages
    from streamops import registry

    reg = registry.parse({"pools": {"p": {"cores": 2}}, "apps": {"w": {
        "r_max_ms": 1000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
        "stages": {"s": {"workload": "wordcount", "source": {"kind": "files", "path": "w/s"}, "pool": "p",
                         "cores": {"initial": 1, "max": 2}}}}}})
    stages.sync_registry(reg)
    with clean_db.begin() as conn:
        conn.execute(text("UPDATE stages SET health = 'failed', health_reason = '3 restarts in a row failed' "
                          "WHERE stage_id = 'w.s'"))
    result = runner.invoke(app, ["status"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "FAILED (watchdog gave up; redeploy)" in result.output
