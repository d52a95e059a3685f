"""The control loop on a real stage: overload it with the per-record CPU cost, and find the
Operator Manager's scale-out request, the Application Manager's grant and a pending
reconfiguration in PostgreSQL. Asserts on the rows, not on timing."""

from __future__ import annotations

import threading
import time
from datetime import UTC

import pytest
from sqlalchemy import text

from demo.stages import demo_job
from spark_apps.stage import JAVA_OPTIONS_ENV
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
                **demo_job("wordcount", {"kind": "files", "path": "ctl/in", "max_files_per_trigger": 5}),
                "cores": {"initial": 1, "max": 2}, "state_partitions": 2, "trigger_interval_ms": 1000, "pool": "p",
                "policy": {"kind": "edf", "params": {"window_s": 20, "stabilization_s": 5, "local_period_s": 5}},
                "params": {"cpu_cost": 6000},
            }},
        }},
    })


def _rows(engine, sql, **params):
    with engine.connect() as conn:
        return conn.execute(text(sql), params).mappings().all()


def test_overloaded_stage_gets_a_request_a_grant_and_a_pending_reconfiguration(clean_db, monkeypatch):
    # Its load is a SHA-256 burn in the JVM sized for Java's default JIT. Under the tests' C1-only
    # JIT (conftest.py) a batch took 12 s, and a 20 s window then holds at most one finished 12 s
    # batch (rows are stamped at its start, written at its end): S <= 0.6 < S_out once steady.
    monkeypatch.setenv(JAVA_OPTIONS_ENV, "")
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


def test_a_request_in_flight_stale_or_changing_nothing_is_declined_without_a_token(clean_db):
    """Issue 26: a second scale-out request, made while the first change was in flight, was
    granted as scale_out 2→2, spent a token and was "realized" with a 6.7 s output gap. The
    re-plan now declines, before the token bucket: a request for a stage with a change in flight,
    one made on metrics from before the stage's last change, and one that changes nothing. No
    token is spent and no reconfiguration is recorded. A no-op that reaches the executor anyway
    is cancelled there, with no stop."""
    from datetime import datetime, timedelta

    from streamops.execute import reconfigure
    from streamops.quality import gate_new_run

    reg = registry.parse({
        "pools": {"p": {"cores": 8}},
        "apps": {"nf": {"r_max_ms": 3000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                        "control": {"policy": "token_bucket", "capacity": 1, "beta": 0.75},
                        "stages": {n: {**demo_job("wordcount", {"kind": "files", "path": f"nf/{n}"}),
                                       "cores": {"initial": 2, "max": 4}, "pool": "p"}
                                   for n in ("noop", "busy", "stale")}}},
    })
    stages.sync_registry(reg)
    now = datetime.now(UTC)
    with clean_db.begin() as conn:
        for n in ("noop", "busy", "stale"):
            conn.execute(text(
                "INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, "
                "status, started_at, running_at) VALUES (:s, 'p', 2, 4, '{}', 'local', '/c', 'running', :t, :t)"),
                {"s": f"nf.{n}", "t": now - timedelta(minutes=30)})
        conn.execute(text("INSERT INTO reconfigurations (stage_id, app, action, from_cores, target_cores, status, "
                          "requested_by) VALUES ('nf.busy', 'nf', 'scale_out', 2, 3, 'running', 'policy:edf')"))
        conn.execute(text("INSERT INTO reconfigurations (stage_id, app, action, from_cores, target_cores, status, "
                          "requested_by, finished_at) VALUES ('nf.stale', 'nf', 'scale_out', 1, 2, 'done', "
                          "'policy:edf', :f)"), {"f": now - timedelta(seconds=30)})
        for n, target, made in (("noop", 2, now), ("busy", 4, now), ("stale", 3, now - timedelta(seconds=60))):
            conn.execute(text(
                "INSERT INTO requests (stage_id, app, action, target_cores, gain, cost_ms, reason, policy, created_at, "
                "refreshed_at) VALUES (:s, 'nf', 'scale_out', :c, 10, 1000, 'O 68 > 60', 'edf', :m, :m)"),
                {"s": f"nf.{n}", "c": target, "m": made})

    report = control.replan("nf", operators=False)
    decided = {d.request.stage_id: (d.outcome, d.reason) for a in report.apps for d, _ in a.decisions}
    assert decided["nf.noop"] == ("declined", "nothing to change: the stage already runs with 2 cores in pool 'p'")
    assert decided["nf.busy"] == ("declined", "a change of this stage is in flight")
    assert decided["nf.stale"][0] == "declined" and "before the stage's last change" in decided["nf.stale"][1]
    rows = _rows(clean_db, "SELECT stage_id, tokens_before, tokens_after FROM decisions WHERE app = 'nf'")
    assert len(rows) == 3 and all(r["tokens_before"] == r["tokens_after"] for r in rows), rows
    assert _rows(clean_db, "SELECT tokens FROM app_control WHERE app = 'nf'")[0]["tokens"] == 1, "no token spent"
    assert _rows(clean_db, "SELECT count(*) AS n FROM reconfigurations WHERE app = 'nf'")[0]["n"] == 2, "none added"
    assert {r["status"] for r in _rows(clean_db, "SELECT status FROM requests WHERE app = 'nf'")} == {"declined"}

    # A no-op planned anyway (the stage changed between grant and execution): cancelled, not run.
    with clean_db.begin() as conn:
        rid = conn.execute(text("INSERT INTO reconfigurations (stage_id, app, action, from_cores, target_cores, "
                                "status, requested_by) VALUES ('nf.noop', 'nf', 'scale_out', 1, 2, 'pending', "
                                "'policy:edf') RETURNING id")).scalar_one()
    out = reconfigure.execute(rid, gate=gate_new_run, reg=reg)
    assert out.status == "cancelled" and out.downtime_ms is None and "nothing to change" in out.detail
    row = _rows(clean_db, "SELECT status, downtime_ms, mechanism FROM reconfigurations WHERE id = :i", i=rid)[0]
    assert (row["status"], row["downtime_ms"], row["mechanism"]) == ("cancelled", None, None)


def _running_stage(engine, app: str):
    """App `app`'s one stage `s` (2 cores of a pool of 8), running for 30 minutes: its deployment
    id and now."""
    from datetime import datetime, timedelta

    stages.sync_registry(registry.parse({
        "pools": {"p": {"cores": 8}},
        "apps": {app: {"r_max_ms": 3000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                       "stages": {"s": {**demo_job("wordcount", {"kind": "files", "path": f"{app}/s"}),
                                        "cores": {"initial": 2, "max": 4}, "pool": "p"}}}},
    }))
    now = datetime.now(UTC)
    with engine.begin() as conn:
        dep = conn.execute(text(
            "INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, status, "
            "started_at, running_at) VALUES (:s, 'p', 2, 4, '{}', 'local', '/c', 'running', :t, :t) RETURNING id"),
            {"s": f"{app}.s", "t": now - timedelta(minutes=30)}).scalar_one()
    return dep, now


def test_the_operator_s_window_starts_after_a_live_change_and_is_empty_while_one_is_in_flight(clean_db):
    """A live change keeps the run, so the stabilization after a restart never applied to it: the
    next decision read the metrics of the configuration it had just left."""
    from datetime import timedelta

    from streamops.plan.options import OperatorOptions

    dep, now = _running_stage(clean_db, "lw")
    opts = OperatorOptions(window_s=120, stabilization_s=10)
    with clean_db.begin() as conn:
        for b, age_s in enumerate(range(110, 0, -10)):  # a batch every 10 s over the last 2 minutes
            conn.execute(text(
                "INSERT INTO stage_metrics (ts, stage_id, deployment_id, run_id, batch_id, input_rows, "
                "batch_duration_ms) VALUES (:ts, 'lw.s', :d, 'r', :b, 100, 10)"),
                {"ts": now - timedelta(seconds=age_s), "d": dep, "b": b})

    def window():
        with clean_db.connect() as conn:
            (stats, _), = control.load_windows(conn, now, opts, app="lw")
        return stats.batches, round(stats.span_s)

    assert window() == (11, 120)
    with clean_db.begin() as conn:  # a live change ended 55 s ago: the window starts 10 s after it
        conn.execute(text(
            "INSERT INTO reconfigurations (stage_id, app, action, from_cores, target_cores, status, requested_by, "
            "finished_at, mechanism) VALUES ('lw.s', 'lw', 'scale_out', 2, 3, 'done', 'policy:edf', :f, 'live')"),
            {"f": now - timedelta(seconds=55)})
    assert window() == (4, 45), "only the batches 10 s or more after the change"
    with clean_db.begin() as conn:
        conn.execute(text("INSERT INTO reconfigurations (stage_id, app, action, from_cores, target_cores, status, "
                          "requested_by) VALUES ('lw.s', 'lw', 'scale_out', 3, 4, 'running', 'policy:edf')"))
    assert window() == (0, 0), "no window while a change is in flight"


def test_the_operator_s_window_measures_the_last_seconds_arrivals_beside_its_mean(clean_db):
    """A surge shows in the window's mean only as the window fills: mpc also reads the rows arriving
    over its last recent_s (processed + the backlog's slope), from the same metrics."""
    from datetime import timedelta

    from streamops.plan.options import OperatorOptions

    dep, now = _running_stage(clean_db, "rs")
    with clean_db.begin() as conn:
        for b, age_s in enumerate(range(115, 0, -5)):  # a batch every 5 s; the last three in the surge
            surge = age_s < 20
            conn.execute(text(
                "INSERT INTO stage_metrics (ts, stage_id, deployment_id, run_id, batch_id, input_rows, "
                "batch_duration_ms, backlog_rows) VALUES (:ts, 'rs.s', :d, 'r', :b, :n, 10, :q)"),
                {"ts": now - timedelta(seconds=age_s), "d": dep, "b": b, "n": 500 if surge else 100,
                 "q": (20 - age_s) * 100 if surge else 0})
    with clean_db.connect() as conn:
        (stats, _), = control.load_windows(conn, now, OperatorOptions(stabilization_s=0, recent_s=20), app="rs")
    # 1 500 rows in the last 20 s, and the backlog growing 100 rows/s
    assert stats.recent_arrival_rate == pytest.approx(1500 / 20 + 100)
    assert stats.input_rate + stats.backlog_growth_rps < 60 and stats.arrival_rate == pytest.approx(175)


def test_a_scale_in_a_cluster_stage_takes_live_is_granted_outside_the_window_to_run_live(clean_db):
    """Issue 46 item 4: a scale-in realized by giving executors back (a standalone pool, whole
    executors, the state partitions kept) touches no checkpoint and stops nothing, so re-plan
    grants it outside the maintenance window, planned with mechanism `live`: it runs live or not
    at all. The same scale-in of a local stage (local[N] is fixed at start) waits for the window."""
    from datetime import datetime, timedelta

    reg = registry.parse({
        "pools": {"p": {"cores": 8}},
        "apps": {"lv": {"r_max_ms": 3000, "maintenance_window": {"cron": "0 3 1 1 *", "duration_min": 30},
                        "control": {"policy": "token_bucket", "capacity": 1, "beta": 0.75},
                        "stages": {n: {**demo_job("wordcount", {"kind": "files", "path": f"lv/{n}"}),
                                       "cores": {"initial": 4, "min": 1, "max": 4}, "pool": "p"}
                                   for n in ("cluster", "local")}}},
    })
    stages.sync_registry(reg)
    now = datetime.now(UTC)
    pools = {"cluster": '{"pool": {"master": "embedded", "cores": 8, "executor_cores": 1}}',
             "local": '{"pool": {"master": "local", "cores": 8, "executor_cores": 1}}'}
    with clean_db.begin() as conn:
        for n, config in pools.items():
            conn.execute(text(
                "INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, "
                "status, started_at, running_at) VALUES (:s, 'p', 4, 4, CAST(:c AS jsonb), 'local', '/c', 'running', "
                ":t, :t)"), {"s": f"lv.{n}", "c": config, "t": now - timedelta(hours=2)})
            conn.execute(text(
                "INSERT INTO requests (stage_id, app, action, target_cores, gain, cost_ms, reason, policy, snapshot, "
                "created_at, refreshed_at) VALUES (:s, 'lv', 'scale_in', 2, 1, 1000, 'S low', 'edf', "
                "'{\"cores\": 4}', :m, now())"),
                {"s": f"lv.{n}", "m": now - timedelta(hours=2)})  # wanted longer than scale_down_delay_s

    report = control.replan("lv", operators=False)
    rows = {r["stage"]: r for r in control.to_rows(report)}
    assert rows["lv.cluster"]["outcome"] == "granted" and rows["lv.cluster"]["live"], rows["lv.cluster"]
    assert "live scale-in" in rows["lv.cluster"]["reason"]
    assert rows["lv.local"]["outcome"] == "deferred" and not rows["lv.local"]["live"], rows["lv.local"]
    planned = _rows(clean_db, "SELECT stage_id, status, mechanism FROM reconfigurations WHERE app = 'lv'")
    assert [(r["stage_id"], r["status"], r["mechanism"]) for r in planned] == [("lv.cluster", "pending", "live")]
    assert _rows(clean_db, "SELECT tokens FROM app_control WHERE app = 'lv'")[0]["tokens"] == 1, "no token spent"


def test_a_refreshed_scale_in_keeps_the_most_cores_it_asked_for_and_a_scale_out_the_newest(clean_db):
    """sql/queries/requests_upsert.sql applies plan.stability.refreshed_target: an Operator Manager
    asking 10→4, then 10→2 at a trough, leaves one open scale-in to 4 (Flink's scale-down interval
    takes the largest parallelism recommended within it); a scale-out takes each newest ask."""
    import json

    from streamops.store import db

    stages.sync_registry(_registry())

    def ask(action: str, cores: int, target: int) -> int:
        row = {"stage_id": "ctl.hot", "app": "ctl", "action": action, "target_cores": target, "target_pool": None,
               "gain": 0.5, "cost_ms": 1000.0, "reason": "test", "snapshot": json.dumps({"cores": cores}),
               "policy": "mpc"}
        with clean_db.begin() as conn:
            db.bulk("requests_upsert", [row], conn)
        stored = _rows(clean_db, "SELECT target_cores FROM requests WHERE stage_id = 'ctl.hot' AND action = :a "
                                 "AND status = 'open'", a=action)
        assert len(stored) == 1, stored  # refreshed, never duplicated
        return stored[0]["target_cores"]

    assert ask("scale_in", 10, 4) == 4
    assert ask("scale_in", 10, 2) == 4, "a dip does not deepen a waiting scale-in"
    assert ask("scale_in", 10, 6) == 6
    assert ask("scale_in", 6, 3) == 3, "the stage now runs the kept target: the newest ask"
    assert ask("scale_out", 2, 8) == 8
    assert ask("scale_out", 2, 4) == 4
