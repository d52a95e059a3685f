"""Stages on a real Spark standalone cluster (issue 13): cores changed live by adding and
removing executors while the query runs, and an executor JVM killed mid-stream; each checked
against the generator's ground truth (no key lost or counted twice)."""

from __future__ import annotations

import os
import signal

import psutil
import pytest
from sqlalchemy import text

from streamops import quality, registry, spark_cluster
from streamops.execute import reconfigure, stages
from tests.test_e2e_stage import eventually
from tests.test_reconfigure import Feeder, _commits, _row, _settle_and_compare

pytestmark = [pytest.mark.e2e, pytest.mark.db]


def _registry(name: str, initial: int = 1) -> registry.Registry:
    stage = {"workload": "wordcount", "source": {"kind": "files", "path": f"rc/{name}", "max_files_per_trigger": 3},
             "cores": {"initial": initial, "max": 2}, "state_partitions": 2, "trigger_interval_ms": 1000,
             "pool": "cluster", "policy": {"kind": "edf"}}
    return registry.parse({
        "pools": {"cluster": {"master": "embedded", "cores": 2, "executor_cores": 1, "executor_memory": "512m"}},
        "apps": {"rc": {"r_max_ms": 5000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                        "stages": {name: stage}}},
    })


def _app_cores(driver_id: str) -> int:
    """The cores the master has granted the application now."""
    c = spark_cluster.load_record()
    state = spark_cluster.master_state(c) if c else None
    apps = [a for a in (state or {}).get("activeapps", []) if a["id"] == driver_id]
    return apps[0]["cores"] if apps else 0


def _runs(engine, sid: str):
    with engine.connect() as conn:
        return conn.execute(text("SELECT id, status, cores, driver_id, state_partitions FROM deployments "
                                 "WHERE stage_id = :s ORDER BY id"), {"s": sid}).all()


def _executor_pids(driver_id: str) -> list[int]:
    return [p.pid for p in psutil.process_iter(["cmdline"])
            if "CoarseGrainedExecutorBackend" in " ".join(p.info["cmdline"] or []) and driver_id in p.info["cmdline"]]


def test_live_scaling_and_an_executor_kill_keep_the_query_running_and_lose_nothing(clean_db, spark_standalone):
    """One run throughout: live scale-out 1 -> 2 cores, an executor JVM killed (kill -9) while
    batches run, live scale-in 2 -> 1; the sink equals the ground truth at the end. One test, so
    that `make test` pays for one driver start."""
    reg = _registry("ls")
    with Feeder("rc/ls", seed=31) as feeder:
        stages.start_stage("rc.ls", reg, wait_s=180)
        eventually(lambda: _commits(clean_db, "rc.ls") >= 2, 120, "two committed batches")
        [run] = _runs(clean_db, "rc.ls")
        assert run.state_partitions == 4, "key groups: 2 x max cores, so scaling to 2 cores needs no repartition"
        assert _app_cores(run.driver_id) == 1, "the driver trimmed the master's grant to its 1 core"

        rid = reconfigure.request("rc.ls", "scale_out", cores=2, mechanism="live", reg=reg, requested_by="test")
        out = reconfigure.execute(rid, gate=quality.gate_new_run, reg=reg)
        assert out.status == "done", out.detail
        row = _row(clean_db, rid)
        assert row.scale_requested_at and row.executors_ready_at and row.stop_requested_at is None, \
            "the query never stopped"
        [run2] = _runs(clean_db, "rc.ls")
        assert (run2.id, run2.status, run2.cores) == (run.id, "running", 2), "the same driver, now with 2 cores"
        assert _app_cores(run.driver_id) == 2

        # An executor JVM dies mid-stream: Spark re-runs its tasks, the master replaces it.
        pids = _executor_pids(run.driver_id)
        assert len(pids) == 2, pids
        os.kill(pids[-1], signal.SIGKILL)
        before = _commits(clean_db, "rc.ls")
        eventually(lambda: _commits(clean_db, "rc.ls") >= before + 5, 120, "commits after the executor kill")
        eventually(lambda: len(_executor_pids(run.driver_id)) == 2, 60, "the master to replace the executor")

        rid = reconfigure.request("rc.ls", "scale_in", cores=1, mechanism="live", reg=reg, requested_by="test")
        out = reconfigure.execute(rid, gate=quality.gate_new_run, reg=reg)
        assert out.status == "done", out.detail
        before = _commits(clean_db, "rc.ls")
        eventually(lambda: _commits(clean_db, "rc.ls") >= before + 3, 60, "commits after the scale-in")
        assert _app_cores(run.driver_id) == 1
        _settle_and_compare(clean_db, feeder, "rc.ls")
    [after] = _runs(clean_db, "rc.ls")
    assert (after.id, after.status) == (run.id, "running"), "one run from start to end"
    with clean_db.connect() as conn:
        changes = conn.execute(text("SELECT from_cores, to_cores FROM deployment_scaling ORDER BY id")).all()
        failures = conn.execute(text("SELECT count(*) FROM failures WHERE stage_id = 'rc.ls'")).scalar_one()
    assert [tuple(c) for c in changes] == [(1, 2), (2, 1)], "every change is kept for the cost view"
    assert failures == 0, "a lost executor is Spark's business, not a stage failure"
    stages.stop_stage("rc.ls", reg, deadline_s=30)
