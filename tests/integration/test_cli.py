"""The command line as a user meets it: help everywhere, clear errors, the status table."""

from __future__ import annotations

from datetime import UTC

import pytest
from typer.testing import CliRunner

from demo.stages import demo_job
from streamops.cli import app

runner = CliRunner()


def _commands(group=None, path=()) -> list[list[str]]:
    """Every command and group of the CLI, read from the app itself: a new one cannot be missed."""
    import typer

    group = group or typer.main.get_command(app)
    out = [list(path)]
    for name, cmd in getattr(group, "commands", {}).items():
        out += _commands(cmd, (*path, name)) if hasattr(cmd, "commands") else [[*path, name]]
    return out


COMMANDS = _commands()


def test_the_command_list_is_the_whole_cli():
    names = {" ".join(c) for c in COMMANDS}
    assert {"spark up", "supervise", "fault", "gen", "airflow trigger", "db status"} <= names, sorted(names)


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "streamops")
def test_help_everywhere(cmd):
    result = runner.invoke(app, [*cmd, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


@pytest.mark.db
def test_bad_registry_is_a_clear_error(tmp_path, monkeypatch, clean_db):
    bad = tmp_path / "apps.yaml"
    bad.write_text("pools: {p: {cores: 2}}\n"
                   "apps: {a: {r_max_ms: 0, maintenance_window: {cron: '0 3 * * *', duration_min: 5},"
                   " stages: {s: {job: 'demo_jobs.web:identity', source: {path: x, schema: 'id STRING'},"
                   " cores: {initial: 1, max: 1}, pool: p}}}}\n")
    monkeypatch.setenv("STREAMOPS_APPS", str(bad))
    result = runner.invoke(app, ["deploy", "a"])
    assert result.exit_code == 2
    assert "app 'a', field 'r_max_ms': Input should be greater than 0" in result.output


@pytest.mark.db
def test_deploy_syncs_and_status_lists_the_stages(clean_db, monkeypatch):
    result = runner.invoke(app, ["deploy", "taxi"])
    assert result.exit_code == 0, result.output
    assert "taxi.top10" in result.output
    result = runner.invoke(app, ["status"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "taxi.top10" in result.output and "never started" in result.output


@pytest.mark.db
def test_unknown_stage_and_app_name_the_known_ones(clean_db):
    result = runner.invoke(app, ["stop", "nope"])
    assert result.exit_code == 1 and "known stages: taxi.top10, hibench.wordcount" in result.output
    result = runner.invoke(app, ["deploy", "nope"])
    assert result.exit_code == 2 and "known apps: taxi, hibench" in result.output
    result = runner.invoke(app, ["gen", "taxi.top10", "--trace", "ramp:speed=3"])
    assert result.exit_code == 2 and "unknown param 'speed'" in result.output


@pytest.mark.db
def test_status_shows_a_stage_the_watchdog_gave_up_on(clean_db, monkeypatch):
    from sqlalchemy import text

    from streamops import registry
    from streamops.execute import stages

    reg = registry.parse({"pools": {"p": {"cores": 2}}, "apps": {"w": {
        "r_max_ms": 1000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
        "stages": {"s": {**demo_job("wordcount", {"kind": "files", "path": "w/s"}), "pool": "p",
                         "cores": {"initial": 1, "max": 2}}}}}})
    stages.sync_registry(reg)
    with clean_db.begin() as conn:
        conn.execute(text("UPDATE stages SET health = 'failed', health_reason = '3 restarts in a row failed' "
                          "WHERE stage_id = 'w.s'"))
    result = runner.invoke(app, ["status"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "FAILED" in result.output
    assert "the watchdog gave up (3 restarts in a row failed); redeploy it" in result.output


# -- requests refused before anything is recorded or stopped (issues 12, 17) ------------------------
def _stage_with_a_run(clean_db, cores=1, pool="p", status="running", extra_pool=True):
    """Stage w.s registered, with a latest run of `cores` in `pool` (a row only: no driver)."""
    import os

    from sqlalchemy import text

    from streamops import registry
    from streamops.execute import stages

    pools = {"p": {"cores": 2}, **({"q": {"cores": 2}} if extra_pool else {})}
    reg = registry.parse({"pools": pools, "apps": {"w": {
        "r_max_ms": 1000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
        "stages": {"s": {**demo_job("wordcount", {"kind": "files", "path": "w/s"}), "pool": "p",
                         "cores": {"initial": 1, "max": 2}}}}}})
    stages.sync_registry(reg)
    with clean_db.begin() as conn:
        dep = conn.execute(text(
            "INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, status, "
            "pid) VALUES ('w.s', :pool, :cores, 4, '{}', 'local', '/nowhere', :status, :pid) RETURNING id"),
            {"pool": pool, "cores": cores, "status": status, "pid": os.getpid()}).scalar_one()
    return reg, dep


@pytest.mark.parametrize("args,message", [
    (["--action", "scale-out", "--cores", "1"],
     "nothing to change: the stage already runs with 1 cores; not restarting it"),
    (["--action", "migrate", "--pool", "p"], "nothing to change: the stage already runs with 1 cores in pool 'p'"),
    (["--action", "migrate"], "migrate needs a target pool (--pool); known pools: p, q"),
    (["--action", "scale-out", "--cores", "99"], "cores must be within [1, 2] (apps.yaml), got 99"),
    (["--action", "scale-out"], "scale-out needs a target: cores (--cores) or state partitions (--partitions)"),
    (["--action", "scale-in", "--cores", "2"], "scale-in to 2 cores is more than the 1 it runs with; use scale-out"),
    (["--action", "explode", "--cores", "2"], "action must be one of scale-out, scale-in, migrate"),
])
@pytest.mark.db
def test_a_bad_or_empty_reconfiguration_is_refused_before_anything_happens(clean_db, tmp_path, monkeypatch, args,
                                                                           message):
    import yaml
    from sqlalchemy import text

    reg, dep = _stage_with_a_run(clean_db)
    path = tmp_path / "apps.yaml"
    path.write_text(yaml.safe_dump(reg.model_dump(mode="json")))
    monkeypatch.setenv("STREAMOPS_APPS", str(path))
    result = runner.invoke(app, ["reconfigure", "w.s", *args], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split()), result.output
    with clean_db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM reconfigurations")).scalar_one() == 0, "no row recorded"
        assert conn.execute(text("SELECT status FROM deployments WHERE id = :d"), {"d": dep}).scalar_one() == "running"
        assert conn.execute(text("SELECT count(*) FROM stage_commands")).scalar_one() == 0, "nothing was stopped"


@pytest.mark.db
def test_reconfigure_resumes_with_the_dags_words_and_keeps_the_older_flags(clean_db, tmp_path, monkeypatch):
    """`--action resume_pending` (the streamops_reconfigure DAG's word) with or without a grant's
    id, and `--pending`/`--resume`, its hidden older spellings, go through the same front door."""
    import yaml

    reg, _ = _stage_with_a_run(clean_db)
    path = tmp_path / "apps.yaml"
    path.write_text(yaml.safe_dump(reg.model_dump(mode="json")))
    monkeypatch.setenv("STREAMOPS_APPS", str(path))
    for args in (["--action", "resume_pending"], ["w.s", "--action", "resume-pending"], ["--pending"], ["--resume"]):
        result = runner.invoke(app, ["reconfigure", *args], env={"COLUMNS": "200"})
        assert result.exit_code == 0 and "reconfigurations" in result.output, (args, result.output)
    result = runner.invoke(app, ["reconfigure", "--action", "resume_pending", "--reconfiguration", "987"])
    assert result.exit_code == 1 and "no reconfiguration 987" in result.output, result.output
    result = runner.invoke(app, ["reconfigure"])
    assert result.exit_code == 2 and "--action resume_pending" in result.output, result.output
    hidden = runner.invoke(app, ["reconfigure", "--help"], env={"COLUMNS": "200"}).output
    assert "resume_pending" in hidden and "--pending" not in hidden and "--resume" not in hidden


@pytest.mark.db
def test_status_shows_the_runs_pool_and_no_latency_for_an_idle_stage(clean_db, monkeypatch):
    from datetime import datetime, timedelta

    from sqlalchemy import text

    _, dep = _stage_with_a_run(clean_db, pool="q")  # migrated: the registry says p, the run is on q
    now = datetime.now(UTC)
    with clean_db.begin() as conn:
        for i, (age_s, rows, p95) in enumerate([(300, 100, 900.0), (20, 0, 95_000.0), (5, 0, 97_000.0)]):
            conn.execute(text(
                "INSERT INTO stage_metrics (ts, stage_id, deployment_id, run_id, batch_id, input_rows, "
                "batch_duration_ms, latency_p95_ms) VALUES (:ts, 'w.s', :d, 'r', :b, :rows, 10, :p95)"),
                {"ts": now - timedelta(seconds=age_s), "d": dep, "b": i, "rows": rows, "p95": p95})
    result = runner.invoke(app, ["status"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    line = next(ln for ln in result.output.splitlines() if "w.s" in ln)
    assert " q " in line and " p " not in line, line
    assert "idle" in line and "95,000" not in line and "97,000" not in line, line


@pytest.mark.db
def test_status_is_readable_at_80_columns(clean_db):
    _stage_with_a_run(clean_db)
    result = runner.invoke(app, ["status"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    table = [ln for ln in result.output.splitlines() if ln.strip()]
    assert all(len(ln) <= 80 for ln in table), max(table, key=len)
    assert "…" not in "\n".join(table[:6]), result.output  # no header or cell cut to "st…"
    for header in ("stage", "state", "cores", "p95 ms"):
        assert header in result.output
    words = " ".join(result.output.split())  # the caption wraps at 80 columns
    assert "hidden to fit 80 columns" in words and "--wide" in words
    header = next(ln for ln in table if "stage" in ln and "state" in ln)
    for first in ("cores", "p95 ms", "in/s", "backlog", "beat"):  # what an operator needs first (issue 26)
        assert first in header, header
    hidden = words.split("hidden to fit 80 columns: ")[1].split(" (--wide")[0].split(", ")
    assert "replicas" in hidden and "batch" in hidden, "a column of 1s goes before beat, failures and the plan"
    wide = runner.invoke(app, ["status", "--wide"], env={"COLUMNS": "80"})
    assert wide.exit_code == 0 and "fail 24h" in wide.output
    assert "…" not in wide.output, "--wide never cuts a cell"


@pytest.mark.db
def test_status_watch_into_a_pipe_prints_a_table_per_refresh(clean_db):
    """`make demo | tee demo.log`: Rich's Live printed nothing when its output was not a terminal."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    _stage_with_a_run(clean_db)
    proc = subprocess.Popen([str(Path(sys.executable).parent / "streamops"), "status", "--watch", "--interval", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "120"})
    try:
        time.sleep(14)  # a table at once, then every 5 s at the least (the shortest refresh into a pipe)
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0].decode()
    stamps = [ln for ln in out.splitlines() if ln.startswith("-- ") and ln.endswith(" UTC")]
    assert len(stamps) >= 2, out[-3000:]
    assert out.count("w.s") >= 2 and "stage" in out, out[-3000:]


def test_db_status_never_prints_a_password(monkeypatch):
    monkeypatch.setenv("STREAMOPS_DATABASE_URL", "postgresql+psycopg2://ops:s3cret-pw@db.example:5433/streamops")
    result = runner.invoke(app, ["db", "status"])
    assert result.exit_code == 0, result.output
    assert "s3cret-pw" not in result.output and "postgresql://ops:***@db.example:5433/streamops" in result.output


@pytest.mark.db
def test_gc_removes_the_checkpoints_no_run_needs_and_keeps_the_rest(clean_db):
    import os
    import time
    from pathlib import Path

    from sqlalchemy import text

    from streamops.paths import data_dir

    _stage_with_a_run(clean_db)
    root = data_dir() / "checkpoints"
    current = root / "w.s.staged-2"
    old = time.time() - 7200

    def made(name: str, age_s: float | None = old) -> Path:
        d = root / name
        (d / "commits").mkdir(parents=True, exist_ok=True)
        (d / "commits" / "0").write_text("v1\n")
        if age_s:
            os.utime(d, (age_s, age_s))
        return d
    with clean_db.begin() as conn:
        conn.execute(text("UPDATE deployments SET checkpoint = :c WHERE stage_id = 'w.s'"), {"c": str(current)})
    keep = [made("w.s.staged-2"), made("w.s.staged-2.quarantine"), made("w.s.rollback-9", age_s=None),
            made("other-app.s")]  # the live one and its side query's, a fresh copy, a stage not ours
    gone = [made("w.s"), made("w.s.quarantine"), made("w.s.rollback-7"), made(".w.s.rollback-8.partial")]

    listed = runner.invoke(app, ["gc", "--dry-run"], env={"COLUMNS": "200"})
    assert listed.exit_code == 0, listed.output
    assert all(str(d) in listed.output for d in gone) and all(d.exists() for d in gone)
    result = runner.invoke(app, ["gc"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert not any(d.exists() for d in gone) and all(d.exists() for d in keep), result.output
    assert "checkpoint directories no run needs" in result.output
    assert "quarantine rows older than 90 days" in result.output

    with clean_db.begin() as conn:  # a change in flight: nothing of its stage goes
        conn.execute(text("INSERT INTO reconfigurations (stage_id, app, action, status, requested_by) "
                          "VALUES ('w.s', 'w', 'scale_out', 'pending', 'test')"))
    stale = made("w.s.rollback-10")
    assert runner.invoke(app, ["gc"]).exit_code == 0 and stale.exists()


@pytest.mark.db
def test_status_shows_the_quarantine_query_s_backlog_when_it_lags(clean_db):
    """The main query had read everything (backlog 0) while the quarantine query was 10 minutes
    behind: status said 0."""
    from datetime import datetime

    from sqlalchemy import text

    _, dep = _stage_with_a_run(clean_db)
    with clean_db.begin() as conn:
        conn.execute(text(
            "INSERT INTO stage_metrics (ts, stage_id, deployment_id, run_id, batch_id, input_rows, batch_duration_ms, "
            "backlog_files) VALUES (:ts, 'w.s', :d, 'r', 1, 10, 10, 0)"), {"ts": datetime.now(UTC), "d": dep})
        conn.execute(text("INSERT INTO heartbeats (deployment_id, stage_id, beat_at, query_active, trigger_active, "
                          "info) VALUES (:d, 'w.s', now(), true, false, '{\"quarantine_backlog_files\": 7}')"),
                     {"d": dep})
    result = runner.invoke(app, ["status", "--wide"], env={"COLUMNS": "250"})
    line = next(ln for ln in result.output.splitlines() if "w.s" in ln)
    assert "0 (q 7)" in line, line


def test_gen_stop_stops_one_stage_s_background_generator_then_the_rest(tmp_path, monkeypatch):
    """Issue 26: only `down` stopped the generators (and everything else with them)."""
    import time

    import yaml

    from streamops import processes
    from streamops.paths import state_dir

    apps = tmp_path / "apps.yaml"
    apps.write_text(yaml.safe_dump({"pools": {"p": {"cores": 2}}, "apps": {"g": {
        "r_max_ms": 5000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
        "stages": {n: {**demo_job("wordcount", {"kind": "files", "path": f"g/{n}"}),
                       "cores": {"initial": 1, "max": 1}, "pool": "p"} for n in ("a", "b")}}}}))
    monkeypatch.setenv("STREAMOPS_APPS", str(apps))
    for sid in ("g.a", "g.b"):
        result = runner.invoke(app, ["gen", sid, "--background", "--duration", "600"])
        assert result.exit_code == 0, result.output
    pids = {sid: processes.read_pid(state_dir() / "run" / f"gen-{sid}.pid") for sid in ("g.a", "g.b")}
    try:
        assert all(pid and processes.is_alive(pid) for pid in pids.values()), pids
        result = runner.invoke(app, ["gen", "--stop", "g.a"])
        assert result.exit_code == 0 and "generator g.a stopped" in result.output, result.output
        deadline = time.monotonic() + 30
        while processes.is_alive(pids["g.a"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not processes.is_alive(pids["g.a"]) and processes.is_alive(pids["g.b"])
        result = runner.invoke(app, ["gen", "--stop"])
        assert "generator g.b stopped" in result.output, result.output
        assert "no background generator" in runner.invoke(app, ["gen", "--stop"]).output
        assert runner.invoke(app, ["gen"]).exit_code == 2, "STAGE is required without --stop"
    finally:
        for pid in pids.values():
            if pid and processes.is_alive(pid):
                processes.stop(pid, grace_s=5)


def test_sim_bound_writes_the_frontier_and_prices_mpc(tmp_path):
    out = tmp_path / "b"
    result = runner.invoke(app, ["sim", "--policy", "mpc", "--slo-price", "60", "--trace", "diurnal",
                                 "--duration", "1800", "--bound", "--out", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = (out / "frontier.csv").read_text().splitlines()
    assert rows[0] == "core_hours,seconds_above_rmax,changes,price" and len(rows) >= 3
    assert (out / "frontier.png").stat().st_size > 10_000
    assert "core regret" in result.output and "violation regret" in result.output
    import json

    assert json.loads((out / "summary.json").read_text())["policy"] == "mpc"
    bad = runner.invoke(app, ["sim", "--policy", "mpc", "--slo-price", "-1", "--out", str(out)])
    assert bad.exit_code == 2 and "slo-price" in bad.output
