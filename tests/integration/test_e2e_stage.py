"""Stage driver processes end to end: start, graceful stop, admission (a crash and its restart: test_ha.py)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from demo.stages import demo_job
from streamops import generator, registry
from streamops.execute import stages

pytestmark = [pytest.mark.e2e, pytest.mark.db]


def _registry(spark_ui: bool = True, **stage_overrides) -> registry.Registry:
    stage = {**demo_job("wordcount", {"kind": "files", "path": "e2e/in", "max_files_per_trigger": 2}),
             "cores": {"initial": 1, "max": 2}, "state_partitions": 2, "trigger_interval_ms": 1000, "pool": "p"}
    stage.update(stage_overrides)
    return registry.parse({
        "pools": {"p": {"cores": 2, "spark_ui": spark_ui}},
        "apps": {"e2e": {"r_max_ms": 5000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                         "stages": {"wc": stage,
                                    "other": {**stage, "source": {**stage["source"], "path": "e2e/other"}}}}},
    })


def eventually(cond, timeout_s: float, what: str, interval: float = 0.5):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def _commits(engine, sid: str) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM sink_commits WHERE stage_id = :s AND rows > 0"),
                            {"s": sid}).scalar_one()


def _quarantined(engine, sid: str) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM quarantine WHERE stage_id = :s"), {"s": sid}).scalar_one()


def _deployment(engine, dep_id: int):
    with engine.connect() as conn:
        return conn.execute(text("SELECT * FROM deployments WHERE id = :i"), {"i": dep_id}).one()


def _run_fed(engine, reg, until_commits: int = 2, **start):
    """Start e2e.wc under a web feed with 5 % malformed lines (so the quarantine query has
    batches of its own to be in the middle of) and return (run, feed's stop event, feeder)."""
    stop_feeding = threading.Event()
    feeder = threading.Thread(target=generator.generate, daemon=True, kwargs=dict(
        out_dir=registry.resolve_path("e2e/in"), kind="web", trace="constant:rate=100", seed=5, duration_s=120,
        garbage_fraction=0.05, stop_event=stop_feeding))
    feeder.start()
    run = stages.start_stage("e2e.wc", reg, **start)
    eventually(lambda: _commits(engine, "e2e.wc") >= until_commits, 120, f"{until_commits} committed batches")
    return run, stop_feeding, feeder


def _batches(ckpt: Path) -> tuple[int | None, int | None]:
    """(last planned, last committed) batch of one query's checkpoint."""
    from streamops.checkpoint_layout import last_committed_batch, last_planned_batch

    return last_planned_batch(ckpt), last_committed_batch(ckpt)


def _assert_clean_log(log: str) -> None:
    for bad in ("Connection refused", "Py4JException", "Py4JJavaError", "Traceback", " ERROR "):
        at = log.find(bad)
        # the whole traceback in the message: pytest truncates the log, and this failure is rare
        assert at < 0, f"{bad!r} in the driver log:\n{log[max(0, at - 2000):at + 6000]}"


def _assert_spark_ui_answers(clean_db, dep_id: int) -> None:
    """The run's Spark UI (issue 30): on loopback, recorded on the run and in stage_status, and its
    Structured Streaming tab answers while the stage runs."""
    import httpx

    from streamops.store import db

    url = _deployment(clean_db, dep_id).ui_url
    assert url is not None and url.startswith("http://127.0.0.1:"), url
    assert {r.stage_id: r.ui_url for r in db.rows("stage_status")}["e2e.wc"] == url
    page = httpx.get(f"{url}/StreamingQuery/", timeout=10)
    assert page.status_code == 200 and "Streaming Query" in page.text, (page.status_code, page.text[:300])


def test_graceful_stop_at_a_batch_boundary_with_a_clean_log(clean_db):
    """Every query of the run (main and quarantine) stops between two of its own batches. While it
    runs, its Spark UI answers."""
    reg = _registry()
    run, stop_feeding, feeder = _run_fed(clean_db, reg)
    try:
        _assert_spark_ui_answers(clean_db, run.deployment_id)
        # the quarantine query (a trigger 5x the main one's) has committed a batch with lines in it
        eventually(lambda: _quarantined(clean_db, "e2e.wc") > 0, 60, "a quarantined line")
        result = stages.stop_stage("e2e.wc", reg, deadline_s=30)
    finally:
        stop_feeding.set()
        feeder.join(10)

    assert result.outcome == "graceful" and result.seconds < 30
    dep = _deployment(clean_db, run.deployment_id)
    assert dep.status == "stopped" and dep.exit_code == 0
    assert "at a batch boundary" in dep.stop_reason, dep.stop_reason
    # At a boundary, every planned batch (offsets/N) has its commit (commits/N), in both queries.
    from streamops.checkpoint_layout import QUERIES, query_checkpoint

    for which in QUERIES:
        planned, committed = _batches(query_checkpoint(which, Path(dep.checkpoint)))
        assert planned is not None and planned == committed, f"{which}: planned {planned}, committed {committed}"
    with clean_db.connect() as conn:
        cmd = conn.execute(text("SELECT done_at, outcome FROM stage_commands WHERE deployment_id = :d"),
                           {"d": run.deployment_id}).one()
    assert cmd.done_at is not None and "batch boundary" in cmd.outcome
    log = Path(run.log_path).read_text()
    _assert_clean_log(log)
    assert "interrupted batch" not in log
    assert "action=exit status=stopped" in log


def test_a_stop_past_its_deadline_names_the_interrupted_query_in_one_warning(clean_db):
    """Batches of 8 s (an injected slow sink) and a stop deadline of 2 s (the driver waits half of
    it): the main query is interrupted mid-batch. The driver says so in one WARN line naming the
    query and the batch, with no py4j traceback; the next run finishes that batch. Its pool has
    `spark_ui: false`: the run records no UI."""
    reg = _registry(spark_ui=False)
    run, stop_feeding, feeder = _run_fed(clean_db, reg, until_commits=1, fault="slow_batches")
    try:
        result = stages.stop_stage("e2e.wc", reg, deadline_s=2, kill_after_s=60)
    finally:
        stop_feeding.set()
        feeder.join(10)

    dep = _deployment(clean_db, run.deployment_id)
    assert dep.status == "stopped" and "interrupted a batch" in dep.stop_reason, (result, dep.stop_reason)
    assert dep.ui_url is None, "spark_ui: false"
    planned, committed = _batches(Path(dep.checkpoint))
    assert planned == committed + 1, (planned, committed)
    log = Path(run.log_path).read_text()
    warnings = [line for line in log.splitlines() if "action=stop query=main interrupted batch" in line]
    assert len(warnings) == 1 and f"batch {planned} " in warnings[0] and " WARNING " in warnings[0], warnings
    _assert_clean_log(log)


def test_admission_refuses_a_stage_the_pool_has_no_cores_for(clean_db):
    reg = _registry(cores={"initial": 2, "max": 2})
    stages.sync_registry(reg)
    with clean_db.begin() as conn:  # a live 2-core run of e2e.wc, held by this very process
        conn.execute(text(
            "INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, status, "
            "pid) VALUES ('e2e.wc', 'p', 2, 2, '{}', 'local', '/nowhere', 'running', :pid)"), {"pid": os.getpid()})
    again = stages.start_stage("e2e.wc", reg)
    assert again.already_running, "a second start of a live stage does not double it"
    with pytest.raises(stages.AdmissionRefused, match="pool 'p' has 0 free of 2 cores; stage e2e.other needs 2"):
        stages.start_stage("e2e.other", reg)
    with clean_db.connect() as conn:
        refused = conn.execute(text("SELECT status, stop_reason FROM deployments WHERE stage_id = 'e2e.other'")).one()
    assert refused.status == "refused" and "0 free of 2 cores" in refused.stop_reason
