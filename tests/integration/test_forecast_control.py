"""Predictive input in production (forecast_pass, stage_rate_history.sql): a stage whose policy
sets `forecast: true` gets `forecast_rate` from its stage_metrics history, and its Operator
Manager asks ahead of the ramp; a stage that does not ask gets nothing. Rows only, no Spark."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from demo.stages import demo_job
from streamops import control, forecast_pass, registry
from streamops.execute import stages
from streamops.plan.options import OperatorOptions
from streamops.store import db

pytestmark = pytest.mark.db

PARAMS = {"forecast": True, "forecast_season_s": 0, "forecast_horizon_s": 600}


def _registry(pred_kind: str = "threshold3", pred_params: dict = PARAMS) -> registry.Registry:
    def stage(kind: str, params: dict) -> dict:
        return {**demo_job("wordcount", {"kind": "files", "path": "fc/in"}),
                "cores": {"initial": 1, "max": 2},
                "state_partitions": 2, "trigger_interval_ms": 10_000, "pool": "p",
                "policy": {"kind": kind, "params": params}}
    return registry.parse({
        "pools": {"p": {"cores": 4}},
        "apps": {"fc": {"r_max_ms": 5000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                        "stages": {"pred": stage(pred_kind, pred_params), "plain": stage("threshold3", {})}}},
    })


def _deployment(conn, stage_id: str, role: str, since: datetime) -> int:
    return conn.execute(text(
        "INSERT INTO deployments (stage_id, role, pool, cores, state_partitions, config, launcher, checkpoint, status, "
        "pid, started_at, running_at) VALUES (:s, :r, 'p', 1, 2, '{}', 'local', '/nowhere', 'running', :pid, :t, :t) "
        "RETURNING id"), {"s": stage_id, "r": role, "pid": os.getpid(), "t": since}).scalar_one()


def _ramp(conn, stage_id: str, dep: int, run: str, t0: datetime, t1: datetime, rate0: float, rate1: float,
          busy: float = 0.7, skip: tuple[datetime, datetime] | None = None) -> None:
    """A batch every 10 s from t0 to t1, the input rate rising linearly, each batch busy `busy` of its trigger."""
    n = int((t1 - t0).total_seconds() // 10)
    rows = []
    for i in range(n):
        ts = t0 + timedelta(seconds=10 * i)
        if skip and skip[0] <= ts < skip[1]:
            continue
        rows.append({"ts": ts, "s": stage_id, "d": dep, "r": run, "b": i,
                     "n": int((rate0 + (rate1 - rate0) * i / n) * 10), "ms": int(busy * 10_000)})
    conn.execute(text(
        "INSERT INTO stage_metrics (ts, stage_id, deployment_id, run_id, batch_id, input_rows, batch_duration_ms, "
        "latency_p95_ms) VALUES (:ts, :s, :d, :r, :b, :n, :ms, 500)"), rows)


def test_a_forecasting_stage_gets_its_forecast_and_asks_ahead_of_the_ramp(clean_db):
    stages.sync_registry(_registry())
    forecast_pass._HISTORY.clear()
    forecast_pass._FORECASTER.last.clear()
    now = datetime.now(UTC).replace(microsecond=0)
    start = now - timedelta(minutes=40)
    with db.transaction() as conn:
        for sid in ("fc.pred", "fc.plain"):
            dep = _deployment(conn, sid, "primary", start)
            # 30 → 250 rows/s over 40 minutes, with 5 minutes without metrics (the stage was down)
            _ramp(conn, sid, dep, "r1", start, now, 30.0, 250.0,
                  skip=(now - timedelta(minutes=25), now - timedelta(minutes=20)))
        replica = _deployment(conn, "fc.pred", "replica-1", start)
        _ramp(conn, "fc.pred", replica, "r2", start, now, 5000.0, 5000.0)  # reads the same input again: not counted

    with db.transaction() as conn:
        loaded = control.load_windows(conn, now, OperatorOptions())
        windows = {s.stage_id: s for s, _ in loaded}
        pred, plain = windows["fc.pred"], windows["fc.plain"]
        assert plain.forecast_rate is None
        assert pred.forecast_rate is not None
        # the ramp carries on: ahead of the measured rate, far from the replica's 5000 rows/s
        assert pred.input_rate < pred.forecast_rate < 600, (pred.input_rate, pred.forecast_rate)
        assert forecast_pass._FORECASTER.last["fc.pred"].fitted

        # measured: 70 % busy, load 0.7 → O 62, below alarming; at the forecast peak the load is > 1
        _, requests = control.operator_pass(conn, now, app="fc", host=(0.1, 0.3), windows=loaded)
    by_stage = {r.stage_id: r for r in requests}
    assert "fc.plain" not in by_stage
    asked = by_stage["fc.pred"]
    assert asked.action in ("scale_out", "prestage"), asked
    assert asked.snapshot["forecast_rate"] == pytest.approx(pred.forecast_rate, abs=0.01)

    # a minute later the process reads only the new buckets and advances the model, no refit
    later = now + timedelta(seconds=60)
    with db.transaction() as conn:
        dep = conn.execute(text("SELECT id FROM deployments "
                                "WHERE stage_id = 'fc.pred' AND role = 'primary'")).scalar_one()
        _ramp(conn, "fc.pred", dep, "r1b", now, later, 250.0, 255.0)
    with db.transaction() as conn:
        again = {s.stage_id: s for s, _ in control.load_windows(conn, later, OperatorOptions())}["fc.pred"]
    f = forecast_pass._FORECASTER.last["fc.pred"]
    assert again.forecast_rate == pytest.approx(f.peak) and not f.fitted and f.end_s == pytest.approx(
        (int(later.timestamp()) // 60) * 60)


def test_an_mpc_stage_plans_on_its_forecast_path_and_asks_through_the_same_pass(clean_db):
    """`policy.kind: mpc` runs unchanged in production: the forecast pass gives it the path and its
    spread, and it asks for the cores its plan prices cheapest (docs/policies.md §14.3)."""
    # at 200 core-s per second above R_max the rise within the horizon is worth a core now; at a
    # low price the plan would switch later, so it would ask nothing yet (tests/unit/test_mpc.py)
    stages.sync_registry(_registry("mpc", {**PARAMS, "slo_price": 200}))
    forecast_pass._HISTORY.clear()
    forecast_pass._FORECASTER.last.clear()
    now = datetime.now(UTC).replace(microsecond=0)
    start = now - timedelta(minutes=40)
    with db.transaction() as conn:
        dep = _deployment(conn, "fc.pred", "primary", start)
        _ramp(conn, "fc.pred", dep, "r1", start, now, 30.0, 250.0)  # 1 core, 70 % busy, still rising
    with db.transaction() as conn:
        loaded = control.load_windows(conn, now, OperatorOptions())
        pred = {s.stage_id: s for s, _ in loaded}["fc.pred"]
        assert len(pred.forecast_path) > 1 and pred.forecast_path[-1] > pred.forecast_path[0]  # still rising
        assert pred.forecast_sd == pytest.approx(0, abs=0.5)  # a straight ramp: its steps never vary
        _, requests = control.operator_pass(conn, now, app="fc", host=(0.1, 0.3), windows=loaded)
    # A restart a step later, from a copy staged meanwhile, costs less than one now (plan.cost's
    # share): the first pass stages the copy, and the next, reading the operator's state back, asks.
    staged = {r.stage_id: r for r in requests}["fc.pred"]
    assert staged.action == "prestage" and staged.target_cores == 2 and staged.snapshot["mpc_switch_step"] == 2
    with db.transaction() as conn:
        _, requests = control.operator_pass(conn, now, app="fc", host=(0.1, 0.3), windows=loaded)
    asked = {r.stage_id: r for r in requests}["fc.pred"]
    assert asked.action == "scale_out" and asked.target_cores == 2, asked
    assert asked.reason.startswith("MPC") and asked.snapshot["mpc_target"] == 2
    with db.transaction() as conn:
        policy = dict(conn.execute(text("SELECT action, policy FROM requests WHERE stage_id = 'fc.pred'")).all())
    assert policy == {"prestage": "mpc", "scale_out": "mpc"}
