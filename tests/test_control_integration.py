"""The control loop on a real stage: overload it with the per-record CPU cost, and find the
Operator Manager's scale-out request, the Application Manager's grant and a pending
reconfiguration in PostgreSQL. Asserts on the rows, not on timing."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text

from streamops import control, generator, registry
from streamops.execute import stages

pytestmark = [pytest.mark.e2e, pytest.mark.db]


def _registry() -> registry.Registry:
    return registry.parse({
        "pools": {"p": {"cores": 2}},
        "apps": {"ctl": {
            "r_max_ms": 3000,
            "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
            "control": {"policy": "token_bucket", "capacity": 1, "beta": 0.75},
            "stages": {"hot": {
                "workload": "wordcount", "source": {"kind": "files", "path": "ctl/in", "max_files_per_trigger": 5},
                "cores": {"initial": 1, "max": 2}, "state_partitions": 2, "trigger_interval_ms": 1000, "pool": "p",
                "policy": {"kind": "edf", "params": {"window_s": 20, "stabilization_s": 5, "local_period_s": 5}},
                "params": {"cpu_cost": 6000},
            }},
        }},
    })


def _rows(engine, sql, **params):
    with engine.connect() as conn:
        return conn.execute(text(sql), params).mappings().all()


def test_overloaded_stage_gets_a_request_a_grant_and_a_pending_reconfiguration(clean_db):
    reg = _registry()
    stop = threading.Event()
    feeder = threading.Thread(target=generator.generate, daemon=True, kwargs=dict(
        out_dir=registry.resolve_path("ctl/in"), kind="web", trace="constant:rate=300", seed=9,
        duration_s=180, stop_event=stop))
    feeder.start()
    try:
        stages.start_stage("ctl.hot", reg)
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:  # the driver's own Operator Manager asks
            requests = _rows(clean_db, "SELECT * FROM requests WHERE stage_id = 'ctl.hot' AND action = 'scale_out'")
            if requests:
                break
            time.sleep(2)
        assert requests, "the overloaded stage's Operator Manager requested no scale-out"
        req = requests[0]
        assert req["status"] == "open" and req["target_cores"] == 2 and req["policy"] == "edf"
        assert req["snapshot"]["S"] > 0.7 and req["cost_ms"] > 0 and req["gain"] > 0

        report = control.replan("ctl", operators=False)
    finally:
        stop.set()
        feeder.join(10)
        stages.stop_stage("ctl.hot", reg, deadline_s=30)

    granted = [d for a in report.apps for d, _ in a.decisions if d.outcome == "granted"]
    assert len(granted) == 1 and granted[0].request.action == "scale_out"
    decision = _rows(clean_db, "SELECT * FROM decisions WHERE stage_id = 'ctl.hot'")[0]
    assert decision["outcome"] == "granted" and decision["tokens_before"] == 1 and decision["tokens_after"] == 0
    plan = _rows(clean_db, "SELECT * FROM reconfigurations WHERE stage_id = 'ctl.hot'")
    assert len(plan) == 1
    assert plan[0]["status"] == "pending" and plan[0]["action"] == "scale_out"
    assert (plan[0]["from_cores"], plan[0]["target_cores"]) == (1, 2)
    assert plan[0]["requested_by"] == "policy:edf" and plan[0]["decision_id"] == decision["id"]
    assert _rows(clean_db, "SELECT status FROM requests WHERE id = :i", i=req["id"])[0]["status"] == "granted"
    # One SQL answers "why will ctl.hot restart?"
    why = _rows(clean_db, """
        SELECT rc.action, d.reason AS decision, rq.reason AS request FROM reconfigurations rc
        JOIN decisions d ON d.id = rc.decision_id JOIN requests rq ON rq.id = rc.request_id
        WHERE rc.stage_id = 'ctl.hot'""")[0]
    assert "token spent" in why["decision"] and "S_out" in why["request"]
