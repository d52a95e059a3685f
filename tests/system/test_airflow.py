"""Airflow runs the platform: the DAG files parse cleanly, and each DAG does its job through
`dag.test()` against the real metadata database and real stage drivers; then one end-to-end
run through the real REST API of a real Airflow (api-server, scheduler, dag-processor, triggerer).

Airflow is imported only after the module fixture has pointed its configuration at a test
metadata database (`airflow_test_<pid>` on the same PostgreSQL), because it reads its settings
once, at import.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from datetime import UTC
from pathlib import Path

import pytest
import yaml
from sqlalchemy import text

from demo import oracles
from demo.stages import demo_job
from streamops import generator, registry
from streamops.execute import stages
from streamops.paths import REPO_ROOT
from streamops.ports import free_port
from tests.conftest import ARTIFACTS, _server_url, drop_database, recreate_database
from tests.integration.test_e2e_stage import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.db]

CONTRACT_DAGS = {"streamops_deploy", "streamops_replan", "streamops_reconfigure", "streamops_maintenance_window",
                 "streamops_watchdog", "streamops_nightly_report"}
APP, SID = "af", "af.wc"
_WC = {"cores": {"initial": 1, "min": 1, "max": 2}, "state_partitions": 2,
       "trigger_interval_ms": 1000, "pool": "p1", "policy": {"kind": "edf"}}
_WINDOW = {"cron": "0 3 * * *", "duration_min": 30}
REGISTRY = {
    "pools": {"p1": {"cores": 4, "network_delay_ms": {"p2": 5}}, "p2": {"cores": 2, "network_delay_ms": {"p1": 5}}},
    "apps": {
        APP: {"r_max_ms": 5000, "maintenance_window": _WINDOW, "stages": {"wc": {
            **_WC, **demo_job("wordcount", {"kind": "files", "path": "af/in", "max_files_per_trigger": 2})}}},
        # A second app, started only by the Streams page's test: two running stages on the page. Its
        # window (09:00) is never open when the maintenance-window test looks (03:10, 15:10).
        "ag": {"r_max_ms": 5000, "maintenance_window": {"cron": "0 9 * * *", "duration_min": 30}, "stages": {"wc": {
            **_WC, **demo_job("wordcount", {"kind": "files", "path": "ag/in", "max_files_per_trigger": 2})}}},
    },
}


@pytest.fixture(scope="module")
def airflow_site(test_env, tmp_path_factory):
    from streamops.orchestrate import airflow_home

    home = tmp_path_factory.mktemp("airflow")
    apps = home / "apps.yaml"
    apps.write_text(yaml.safe_dump(REGISTRY))
    saved = dict(os.environ)
    os.environ["STREAMOPS_APPS"] = str(apps)
    site = airflow_home.site(home=home, database=f"airflow_test_{os.getpid()}", port=free_port(),
                             paused_at_creation=True)
    recreate_database(_server_url(), site.database)
    airflow_home.init(site)
    os.environ.update(airflow_home.environment(site))
    try:
        yield site
    finally:
        airflow_home.down(site)  # always, even when a test failed with Airflow running
        if "airflow.settings" in sys.modules:  # let go of the metadata database before dropping it
            sys.modules["airflow.settings"].dispose_orm()
        os.environ.clear()
        os.environ.update(saved)
        drop_database(_server_url(), site.database)


@pytest.fixture(scope="module")
def dagbag(airflow_site):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO_ROOT / "dags"))


@pytest.fixture
def reg(airflow_site) -> registry.Registry:
    return registry.load()


def _stop_quietly(reg) -> None:
    with contextlib.suppress(stages.StageNotRunning):
        stages.stop_stage(SID, reg, deadline_s=30, kill_after_s=10, requested_by="test teardown")


def _live(engine):
    with engine.connect() as conn:
        return conn.execute(text(
            "SELECT * FROM deployments WHERE stage_id = :s AND role = 'primary' AND status = 'running' "
            "ORDER BY started_at DESC LIMIT 1"), {"s": SID}).first()


def _run(dagbag, dag_id: str, conf: dict | None = None):
    dr = dagbag.get_dag(dag_id).test(run_conf=conf)
    return dr


def _task_states(dr) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}


# -- DagBag integrity -------------------------------------------------------------------------
def test_dag_files_parse_cleanly_without_spark(airflow_site):
    """Parsed in a fresh interpreter (this one may have Spark loaded by other tests)."""
    probe = (
        "import json, sys\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"b = DagBag(dag_folder={str(REPO_ROOT / 'dags')!r})\n"
        "out = {'errors': {k: str(v)[-500:] for k, v in b.import_errors.items()},\n"
        "       'pyspark': sorted(m for m in sys.modules if m.startswith('pyspark'))[:3],\n"
        "       'dags': {d.dag_id: {'tags': sorted(d.tags), 'doc': bool(d.doc_md and d.doc_md.strip()),\n"
        "                          'retries_set': 'retries' in (d.default_args or {}),\n"
        "                          'max_active_runs': d.max_active_runs}\n"
        "                for d in b.dags.values()}}\n"
        "print('RESULT' + json.dumps(out))\n"
    )
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=os.environ, timeout=300)
    line = next((ln for ln in res.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert line, f"the DagBag probe failed: {res.stderr[-3000:]}"
    out = json.loads(line.removeprefix("RESULT"))
    assert out["errors"] == {}, out["errors"]
    assert out["pyspark"] == [], f"parsing the DAGs imported Spark: {out['pyspark']}"
    assert set(out["dags"]) >= CONTRACT_DAGS, f"missing DAG ids: {CONTRACT_DAGS - set(out['dags'])}"
    for dag_id, d in out["dags"].items():
        assert "streamops" in d["tags"], f"{dag_id} has no tags"
        assert d["doc"], f"{dag_id} has no doc_md"
        assert d["retries_set"], f"{dag_id}: retries are not set explicitly"
    assert out["dags"]["streamops_replan"]["max_active_runs"] == 1
    assert out["dags"]["streamops_watchdog"]["max_active_runs"] == 1


def test_secrets_are_generated_once_and_private(airflow_site):
    import stat

    from streamops.orchestrate import airflow_home

    first = airflow_home.passwords(airflow_site)
    assert set(first) == {"admin", "viewer"} and all(len(p) >= 16 for p in first.values())
    assert airflow_home.passwords(airflow_site) == first, "passwords are generated once"
    for f in ("passwords.json", "secrets.json", "env.sh"):
        mode = stat.S_IMODE((airflow_site.home / f).stat().st_mode)
        assert mode == 0o600, f"{f} has mode {oct(mode)}"


def test_bad_params_are_rejected_by_the_form_schema(dagbag):
    import copy

    from airflow.sdk.exceptions import ParamValidationError

    for bad in ({"stage": "nope.nothing"}, {"stage": SID, "cores": 0}, {"stage": SID, "action": "explode"},
                {"stage": SID, "pool": "atlantis"}, {"stage": SID, "cores": 99}, {"action": "scale_out", "cores": 2}):
        params = copy.deepcopy(dagbag.get_dag("streamops_reconfigure").params)
        with pytest.raises(ParamValidationError):
            params.update(bad)
            params.validate()
    deploy = copy.deepcopy(dagbag.get_dag("streamops_deploy").params)
    with pytest.raises(ParamValidationError):
        deploy.update({"app": "unknown"})
        deploy.validate()


# -- dag.test() runs --------------------------------------------------------------------------
def test_deploy_then_reconfigure_then_watchdog(dagbag, reg, clean_db):
    """One stage's life through the DAGs: deployed (idempotently), scaled out, killed and recovered;
    the sink still equals the generator's ground truth at the end (no row lost or doubled)."""
    inputs = registry.resolve_path("af/in")
    generator.generate(inputs, "web", "constant:rate=150", seed=7, duration_s=30, realtime=False)
    try:
        dr = _run(dagbag, "streamops_deploy", {"app": APP, "restart": False})
        assert str(dr.state) == "success", _task_states(dr)
        first = _live(clean_db)
        assert first is not None and (first.cores, first.pool) == (1, "p1")

        dr = _run(dagbag, "streamops_deploy", {"app": APP, "restart": False})
        assert str(dr.state) == "success"
        assert _live(clean_db).id == first.id, "a second deploy must leave the running stage alone"

        eventually(lambda: _commits(clean_db) >= 2, 180, "two committed batches")
        dr = _run(dagbag, "streamops_reconfigure", {"stage": SID, "action": "scale_out", "cores": 2})
        assert str(dr.state) == "success", _task_states(dr)
        with clean_db.connect() as conn:
            row = conn.execute(text("SELECT * FROM reconfigurations WHERE stage_id = :s ORDER BY id DESC LIMIT 1"),
                               {"s": SID}).one()
        assert row.status == "done" and row.downtime_ms > 0, (row.status, row.outcome)
        assert row.requested_by.startswith("user:"), row.requested_by
        scaled = _live(clean_db)
        assert scaled.cores == 2

        os.kill(scaled.pid, signal.SIGKILL)  # the driver dies; its JVM child goes with its session
        eventually(lambda: not stages.launcher_for("local").is_alive(scaled.pid), 30, "the driver to die")
        # The stream goes on while the stage is down: the restart has input to commit (on a drained
        # source the watchdog would judge it healthy only after half its 180 s wait).
        generator.generate(inputs, "web", "constant:rate=150", seed=8, duration_s=5, realtime=False)
        dr = _run(dagbag, "streamops_watchdog", {"max_restarts": 3, "stale_s": 60})
        assert str(dr.state) == "success", _task_states(dr)
        with clean_db.connect() as conn:
            f = conn.execute(text("SELECT * FROM failures WHERE stage_id = :s"), {"s": SID}).one()
        assert (f.kind, f.status, f.deployment_id) == ("dead_pid", "recovered", scaled.id)
        assert 0 < f.mttr_ms < 600_000 and 0 < f.downtime_ms < 600_000, (f.mttr_ms, f.downtime_ms)  # measured
        recovered = _live(clean_db)
        assert recovered.id == f.recovery_deployment_id and recovered.cores == 2, "restarted with its last config"

        want = oracles.expected("wordcount", generator.read_valid_records(inputs))
        eventually(lambda: oracles.actual(clean_db, SID, "wordcount") == want, 180,
                   "the sink to equal the ground truth")
    finally:
        _stop_quietly(reg)


def test_watchdog_gives_up_and_alerts(dagbag, reg, clean_db):
    """A stage whose every restart fails is marked failed after N restarts, and the task fails
    with a message naming it (the alert in the UI)."""
    from streamops.execute import watchdog

    try:
        stages.start_stage(SID, reg, wait_s=240)
        live = _live(clean_db)
        # Break the stage so that every restart dies: its checkpoint becomes a file.
        stages.stop_stage(SID, reg, deadline_s=30)
        with clean_db.begin() as conn:
            conn.execute(text("UPDATE deployments SET status = 'failed', stop_reason = 'query failed: test' "
                              "WHERE id = :i"), {"i": live.id})
        ckpt = Path(live.checkpoint)
        import shutil

        shutil.rmtree(ckpt)
        ckpt.write_text("not a checkpoint")
        for _ in range(2):
            report = watchdog.cycle(reg, max_restarts=2, wait_s=120)
        assert [r.status for r in report.recoveries] == ["gave_up"], report
        dr = _run(dagbag, "streamops_watchdog", {"max_restarts": 2, "stale_s": 60})
        assert str(dr.state) == "failed"
        with clean_db.connect() as conn:
            health = conn.execute(text("SELECT health, health_reason FROM stages WHERE stage_id = :s"),
                                  {"s": SID}).one()
            f = conn.execute(text("SELECT status, attempts FROM failures WHERE stage_id = :s"), {"s": SID}).one()
        assert health.health == "failed" and "restarts in a row failed" in health.health_reason
        assert (f.status, f.attempts) == ("gave_up", 2)
    finally:
        _stop_quietly(reg)
        broken = Path(stages.checkpoint_for(SID))
        if broken.is_file():  # later tests start the same stage: give them a clean checkpoint
            broken.unlink()


def _commits(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM sink_commits WHERE stage_id = :s AND rows > 0"),
                            {"s": SID}).scalar_one()


def _request(engine, action: str, target_cores: int) -> None:
    """An Operator Manager's request, as a driver's agent would upsert it."""
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO requests (stage_id, app, action, target_cores, gain, cost_ms, reason, policy) "
            "VALUES (:s, :a, :act, :c, 1.0, 5000, 'test: S_out high', 'edf')"),
            {"s": SID, "a": APP, "act": action, "c": target_cores})


def test_replan_grants_and_triggers_the_reconfigure_dag(dagbag, reg, clean_db):
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    stages.sync_registry(reg)
    _request(clean_db, "scale_out", 2)
    dr = _run(dagbag, "streamops_replan")
    assert str(dr.state) == "success", _task_states(dr)
    with clean_db.connect() as conn:
        d = conn.execute(text("SELECT * FROM decisions WHERE stage_id = :s"), {"s": SID}).one()
        plan = conn.execute(text("SELECT * FROM reconfigurations WHERE stage_id = :s"), {"s": SID}).one()
    assert (d.outcome, d.decided_by) == ("granted", "airflow:streamops_replan"), d
    assert (plan.status, plan.action, plan.target_cores, plan.decision_id) == ("pending", "scale_out", 2, d.id)
    with create_session() as session:  # other tests' dag.test() runs of the DAG are in the same metadata db
        runs = session.query(DagRun).filter(DagRun.dag_id == "streamops_reconfigure").all()
    assert {"stage": SID, "action": "resume_pending", "reconfiguration": plan.id} in [r.conf for r in runs], \
        "the granted scale-out is realized by a streamops_reconfigure run of its reconfiguration id"


def test_maintenance_window_realizes_only_disruptive_plans_while_open(reg, clean_db):
    """Pending scale-ins and migrations of an app whose window is open are taken up; a scale-out
    is not (re-plan realizes those); a closed window starts nothing."""
    from datetime import datetime, timedelta

    from streamops.orchestrate import tasks

    stages.sync_registry(reg)
    with clean_db.begin() as conn:
        conn.execute(text("INSERT INTO reconfigurations (stage_id, app, action, from_cores, target_cores, "
                          "requested_by) VALUES (:s, :a, 'scale_in', 2, 1, 'policy:edf')"), {"s": SID, "a": APP})
    today = datetime.now(UTC).replace(hour=3, minute=10, second=0, microsecond=0)
    assert tasks.maintenance_window(now=today - timedelta(hours=12)) == {}, "outside the window: nothing"
    # Open (03:00 + 30 min) as of `now`, but already closed in real time: nothing may start.
    assert tasks.maintenance_window(now=today - timedelta(days=1)) == {APP: []}
    with clean_db.connect() as conn:
        assert conn.execute(text("SELECT status FROM reconfigurations WHERE stage_id = :s"),
                            {"s": SID}).scalar() == "pending"
    # Open as of `now` and still open in real time (today's window, or tomorrow's once today's
    # has passed): the scale-in is claimed (the stage is not running, so it cannot end done).
    in_window = today if datetime.now(UTC) < today + timedelta(minutes=30) else today + timedelta(days=1)
    done = tasks.maintenance_window(now=in_window)
    assert [r["stage"] for r in done[APP]] == [SID]
    with clean_db.connect() as conn:
        assert conn.execute(text("SELECT status FROM reconfigurations WHERE stage_id = :s"),
                            {"s": SID}).scalar() != "pending"


def test_nightly_report_writes_the_days_html(dagbag, clean_db, tmp_path, monkeypatch):
    """The scheduled run of today 00:15 UTC reports yesterday: retention, then the page and its record."""
    from datetime import datetime, time, timedelta

    from tests.integration.test_report import two_apps

    today = datetime.now(UTC).date()
    two_apps(clean_db, today - timedelta(days=1))
    monkeypatch.setenv("STREAMOPS_REPORTS_DIR", str(tmp_path))
    dr = dagbag.get_dag("streamops_nightly_report").test(
        logical_date=datetime.combine(today, time(0, 15), tzinfo=UTC))
    assert str(dr.state) == "success", _task_states(dr)
    assert _task_states(dr) == {"retention": "success", "files": "success", "data_quality": "success",
                                "report": "success"}
    html = (tmp_path / str(today - timedelta(days=1)) / "index.html").read_text()
    assert 'data-app="taxi"' in html and 'data-app="web"' in html and "data:image/png;base64," in html
    with clean_db.connect() as conn:
        assert conn.execute(text("SELECT day FROM reports")).scalar_one() == today - timedelta(days=1)


# -- end to end through the REST API ----------------------------------------------------------
def _assert_nothing_listens_beyond_loopback(site):
    """Every socket an Airflow component (or a child of one) listens on is on loopback, and the
    fixed log-server ports 8793/8794 are not taken: two sites can run side by side."""
    import psutil

    from streamops.orchestrate import airflow_home

    procs = []
    for pid in airflow_home.running(site).values():
        p = psutil.Process(pid)
        procs += [p, *p.children(recursive=True)]
    listening = [(p.name(), c.laddr) for p in procs for c in p.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN]
    assert any(addr.port == site.port for _, addr in listening), f"the API is not listening: {listening}"
    assert all(addr.ip in ("127.0.0.1", "::1") for _, addr in listening), listening
    assert not {8793, 8794} & {addr.port for _, addr in listening}, listening



# 2-3 min: make test-all. Its REST trigger with a real scheduler is the Streams page test's too (the
# Deploy button's run), and the reconfigure DAG is test_deploy_then_reconfigure_then_watchdog's.
@pytest.mark.slow
def test_rest_api_scales_a_running_stage(airflow_site, reg, clean_db):
    """A real Airflow (api-server, scheduler, dag-processor, triggerer; LocalExecutor) on the
    test database: the admin's token triggers streamops_reconfigure with a conf that scales a
    running stage; a conf naming an unknown stage is rejected; the viewer cannot trigger."""
    from streamops.orchestrate import airflow_home
    from streamops.orchestrate.rest import AirflowAPIError, AirflowClient

    inputs = registry.resolve_path("af/in")
    generator.generate(inputs, "web", "constant:rate=150", seed=11, duration_s=20, realtime=False)
    pw = airflow_home.passwords(airflow_site)
    try:
        airflow_home.up(airflow_site, wait_s=300)
        _assert_nothing_listens_beyond_loopback(airflow_site)
        stages.start_stage(SID, reg, wait_s=240)
        eventually(lambda: _commits(clean_db) >= 1, 180, "a committed batch")
        with AirflowClient(airflow_site.base_url, "admin", pw["admin"]) as api:
            api.wait_for_dags(["streamops_reconfigure"], timeout_s=180)
            api.unpause("streamops_reconfigure")

            before = len(api.dag_runs("streamops_reconfigure", limit=100))  # dag.test() runs of other tests
            for conf, field in (({"stage": "nope.nothing", "action": "scale_out", "cores": 2}, "stage"),
                                ({"action": "scale_out", "cores": 2}, "stage"),  # no stage: never "the first one"
                                ({"stage": SID, "action": "scale_out", "cores": 99}, "cores")):
                with pytest.raises(AirflowAPIError) as bad:
                    api.trigger("streamops_reconfigure", conf)
                assert bad.value.status == 400, bad.value
                assert field in str(bad.value.detail), bad.value.detail
            assert len(api.dag_runs("streamops_reconfigure", limit=100)) == before, "a rejected conf created a run"

            # A change to the size the stage already has: refused by the task before anything stops.
            running = _live(clean_db)
            noop = api.trigger("streamops_reconfigure", {"stage": SID, "action": "scale_out", "cores": running.cores})
            assert api.wait("streamops_reconfigure", noop["dag_run_id"], timeout_s=300)["state"] == "failed"
            log = api.task_log("streamops_reconfigure", noop["dag_run_id"], "reconfigure")
            assert "nothing to change: the stage already runs with 1 cores; not restarting it" in log, log[-2000:]
            why = api.failure("streamops_reconfigure", noop["dag_run_id"])  # what `trigger --wait` prints
            assert why.startswith("reconfigure: ") and "nothing to change" in why, why
            assert _live(clean_db).id == running.id, "the stage was not restarted"
            with clean_db.connect() as conn:
                assert conn.execute(text("SELECT count(*) FROM reconfigurations WHERE stage_id = :s"),
                                    {"s": SID}).scalar_one() == 0, "the refused request left no row"

            run = api.trigger("streamops_reconfigure", {"stage": SID, "action": "scale_out", "cores": 2})
            done = api.wait("streamops_reconfigure", run["dag_run_id"], timeout_s=600)
            assert done["state"] == "success", api.task_instances("streamops_reconfigure", run["dag_run_id"])

        with clean_db.connect() as conn:
            row = conn.execute(text("SELECT * FROM reconfigurations WHERE stage_id = :s"), {"s": SID}).one()
        assert (row.status, row.target_cores) == ("done", 2), row
        assert _live(clean_db).cores == 2

        with AirflowClient(airflow_site.base_url, "viewer", pw["viewer"]) as viewer:
            with pytest.raises(AirflowAPIError) as denied:
                viewer.trigger("streamops_reconfigure", {"stage": SID, "action": "scale-in", "cores": 1})
            assert denied.value.status == 403, denied.value
        with pytest.raises(AirflowAPIError) as wrong:
            AirflowClient(airflow_site.base_url, "admin", "not-the-password")
        assert wrong.value.status in (401, 403)

        # kill -9 of the scheduler and the dag-processor: the keeper the supervisor runs restarts
        # both, and Airflow is healthy again (issue 31: they died in a database stop and stayed dead).
        import time

        from streamops import processes

        victims = {c: pid for c, pid in airflow_home.running(airflow_site).items()
                   if c in ("scheduler", "dag-processor")}
        for pid in victims.values():
            os.kill(pid, signal.SIGKILL)
        eventually(lambda: not any(processes.is_alive(p) for p in victims.values()), 10, "the kills")
        killed, killed_wall = time.monotonic(), time.time()
        assert sorted(airflow_home.ComponentKeeper(airflow_site)()) == sorted(victims)
        assert all(airflow_home.running(airflow_site)[c] != pid for c, pid in victims.items())

        def healthy() -> bool:  # beating again: a beat from after the kill (the dead one's stays "healthy" for 30 s)
            from datetime import datetime

            h = airflow_home.health(airflow_site) or {}
            beats = [(h.get(k) or {}).get(f"latest_{k}_heartbeat") for k in ("scheduler", "dag_processor")]
            return all(b and datetime.fromisoformat(b).timestamp() > killed_wall for b in beats)

        eventually(healthy, 180, "Airflow healthy after the restarts")
        print(f"scheduler and dag-processor healthy {time.monotonic() - killed:.1f}s after their kill")
    finally:
        airflow_home.down(airflow_site)
        _stop_quietly(reg)


# -- the Streams page (streamops.ui) ------------------------------------------------------------
PAGE_SIDS = (SID, "ag.wc")


def _login(driver, site, user: str, password: str) -> None:
    """Through Airflow's own login form, as a person would; lands on the Streams page."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    driver.delete_all_cookies()
    driver.get(f"{site.base_url}/plugin/streams")
    wait = WebDriverWait(driver, 60)
    wait.until(ec.presence_of_element_located((By.NAME, "username"))).send_keys(user)
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    frame = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "iframe")))
    assert frame.get_attribute("src").endswith("/streamops/"), frame.get_attribute("src")
    driver.switch_to.frame(frame)
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "tr[data-stage]")))


def _page_rows(driver) -> dict[str, dict[str, str]]:
    from selenium.webdriver.common.by import By

    return {tr.get_attribute("data-stage"): {
        "state": tr.find_element(By.CSS_SELECTOR, "td.state").text,
        "p95": tr.find_element(By.CSS_SELECTOR, "td.p95").text,
        "in": tr.find_element(By.CSS_SELECTOR, "td.in").text,
        "beat": tr.find_element(By.CSS_SELECTOR, "td.beat").text,
        "spark_ui": [a.get_attribute("href") for a in tr.find_elements(By.CSS_SELECTOR, "a.spark-ui")],
    } for tr in driver.find_elements(By.CSS_SELECTOR, "tr[data-stage]")}


def test_streams_page_in_the_airflow_ui(airflow_site, reg, clean_db):
    """The plugin's page inside a real Airflow, with two running stages: the admin and the viewer
    log in through Airflow's form and see both stages with live figures and drawn charts; only
    the admin sees the trigger buttons, and the admin's Deploy button starts a real DAG run.
    Unauthenticated, forged and viewer calls of the actions get 401/403; a bad conf gets the
    Params validation's 400 and creates no run."""
    import threading

    import httpx
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from streamops.orchestrate import airflow_home
    from streamops.orchestrate.rest import AirflowClient
    from tests.browser import chrome, full_page, images_drawn

    stop = threading.Event()
    feeders = [threading.Thread(target=generator.generate, daemon=True, kwargs=dict(
        out_dir=registry.resolve_path(f"{sid.split('.')[0]}/in"), kind="web", trace="constant:rate=60",
        seed=i, duration_s=900, garbage_fraction=0.01, stop_event=stop)) for i, sid in enumerate(PAGE_SIDS)]
    pw = airflow_home.passwords(airflow_site)
    base = airflow_site.base_url
    try:
        for f in feeders:
            f.start()
        airflow_home.up(airflow_site, wait_s=300)
        for sid in PAGE_SIDS:
            stages.start_stage(sid, reg, wait_s=240)
        with AirflowClient(base, "admin", pw["admin"]) as api:
            api.wait_for_dags(["streamops_deploy", "streamops_reconfigure"], timeout_s=180)
            api.unpause("streamops_deploy")

        def live() -> bool:  # every stage reads input: the page has live figures to show
            with AirflowClient(base, "viewer", pw["viewer"]) as v:
                doc = v._http.get("/streamops/api/streams").json()
            st = {s["status"]["stage_id"]: s["status"] for a in doc["apps"] for s in a["stages"]}
            return all(st[s]["status"] == "running" and st[s]["in_rps"] and st[s]["latency_p95_ms"] for s in PAGE_SIDS)

        eventually(live, 240, "both stages running with input on the page's JSON")

        # The actions, over HTTP: who may trigger, and Airflow's Params validation in between.
        url = f"{base}/streamops/api/trigger/streamops_reconfigure"
        conf = {"stage": SID, "action": "scale_out", "cores": 2}
        tokens = {u: httpx.post(f"{base}/auth/token", json={"username": u, "password": pw[u]}).json()["access_token"]
                  for u in ("admin", "viewer")}
        assert httpx.post(url, json=conf).status_code == 401
        assert httpx.get(f"{base}/streamops/api/streams").status_code == 401
        assert httpx.get(f"{base}/streamops/reports/latest").status_code == 401
        assert httpx.get(f"{base}/streamops/charts/{APP}.svg").status_code == 401
        assert httpx.post(url, json=conf, headers={"Authorization": "Bearer not.a.token"}).status_code in (401, 403)
        denied = httpx.post(url, json=conf, headers={"Authorization": f"Bearer {tokens['viewer']}"})
        assert denied.status_code == 403, denied.text
        admin = {"Authorization": f"Bearer {tokens['admin']}"}
        form = {**admin, "Content-Type": "application/x-www-form-urlencoded"}
        assert httpx.post(url, content="stage=af.wc", headers=form).status_code == 415, \
            "a form post (what another site could send) is refused"
        bad = httpx.post(url, json={**conf, "cores": 99}, headers=admin)
        assert bad.status_code == 400 and "cores" in bad.text, bad.text
        runs = httpx.get(f"{base}/api/v2/dags/streamops_reconfigure/dagRuns", headers=admin).json()
        assert all((r.get("conf") or {}).get("cores") != 99 for r in runs["dag_runs"]), "a refused conf made a run"

        with chrome(width=1280, height=1000) as driver:  # issue 48: at 1280 px a Run button was cut off
            for user in ("viewer", "admin"):
                _login(driver, airflow_site, user, pw[user])
                rows = _page_rows(driver)
                assert set(rows) == set(PAGE_SIDS), rows
                for sid, r in rows.items():
                    assert r["state"] == "running", (sid, r)
                    assert r["p95"].replace(",", "").isdigit() and r["in"].replace(",", "").isdigit(), (sid, r)
                    assert r["beat"].endswith("s"), (sid, r)
                    assert r["spark_ui"], f"{sid}: no Spark UI link"
                    assert httpx.get(r["spark_ui"][0], follow_redirects=True, timeout=20).status_code == 200
                WebDriverWait(driver, 30).until(images_drawn)
                sizes = driver.execute_script(
                    "return Array.from(document.images).map(i => [i.naturalWidth, i.naturalHeight])")
                assert len(sizes) == 2 and all(w > 0 and h > 0 for w, h in sizes), sizes  # one sparkline per app
                forms = driver.find_elements(By.CSS_SELECTOR, "form.act")
                if user == "viewer":
                    assert not forms, "the viewer sees trigger buttons"
                    continue
                assert len(driver.find_elements(By.CSS_SELECTOR, "form.reconfigure")) == 2
                frame_px, *ends = driver.execute_script(
                    "return [window.innerWidth, ...Array.from(document.querySelectorAll('form.reconfigure button'))"
                    ".map(b => b.getBoundingClientRect().right)]")
                assert len(ends) == 2 and all(e <= frame_px for e in ends), \
                    f"a Run button past the Airflow frame's {frame_px} px: {ends}"
                print(f"Streams page: Airflow's frame {frame_px} px wide at 1280, the Run buttons end at {ends} px")
                driver.switch_to.default_content()
                full_page(driver, 1280)
                ARTIFACTS.mkdir(exist_ok=True)
                driver.save_screenshot(str(ARTIFACTS / "airflow_streams_page.png"))
                driver.switch_to.frame(driver.find_element(By.CSS_SELECTOR, "iframe"))
                # The Deploy button: a real run of streamops_deploy, as this admin.
                driver.find_element(By.CSS_SELECTOR, "section[data-app=ag] form.deploy button").click()
                msg = WebDriverWait(driver, 30).until(
                    lambda d: d.find_element(By.ID, "message").text if "Triggered" in d.find_element(
                        By.ID, "message").text else None)
                run_id = msg.split("streamops_deploy ", 1)[1].strip()
        with AirflowClient(base, "admin", pw["admin"]) as api:
            done = api.wait("streamops_deploy", run_id, timeout_s=300)
            assert done["state"] == "success", api.task_instances("streamops_deploy", run_id)
            assert done["conf"] == {"app": "ag", "restart": False}, done["conf"]
    finally:
        stop.set()
        airflow_home.down(airflow_site)
        for sid in PAGE_SIDS:
            with contextlib.suppress(stages.StageNotRunning):
                stages.stop_stage(sid, reg, deadline_s=30, kill_after_s=10, requested_by="test teardown")
