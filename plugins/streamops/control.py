"""One control cycle against PostgreSQL: monitor → analyze → plan (→ execute, later).

    stage windows (one SQL pass) → Operator Managers → requests (refreshed, never duplicated)
    → Application Manager per app, under an advisory lock → decisions → pending reconfigurations

The maths is in `analyze` and `plan` (pure); this module only reads and writes.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import psutil
from sqlalchemy import Connection, text

from streamops.analyze.stats import StageStats
from streamops.plan.application import AppView, application_cycle
from streamops.plan.cost import CostModel, Observation
from streamops.plan.model import LOCAL, RECONFIGURATIONS, AppState, Decision, OperatorState, Request
from streamops.plan.operator import OperatorContext, PoolRoom, operator_cycle
from streamops.plan.options import AppOptions, OperatorOptions
from streamops.store import db

log = logging.getLogger("streamops.control")

# Requests whose Operator Manager stopped refreshing them for this long have lost their condition.
STALE_REQUEST_S = 300.0


@dataclass
class AppCycle:
    app: str
    decisions: list[tuple[Decision, int | None]] = field(default_factory=list)  # (decision, reconfiguration id)
    tokens: float = 0.0
    response_ms: float | None = None
    skipped: str | None = None


@dataclass
class CycleReport:
    stages_analyzed: int
    requests: list[Request]
    apps: list[AppCycle]
    seconds: dict[str, float]


def host_utilization() -> tuple[float, float]:
    """U_r and memory use of this host: the local pools' hosts."""
    return psutil.cpu_percent(interval=0.2) / 100.0, psutil.virtual_memory().percent / 100.0


def load_windows(conn: Connection, now: datetime, opts: OperatorOptions, app: str | None = None,
                 stage: str | None = None) -> list[tuple[StageStats, dict]]:
    rows = conn.execute(db.query("stage_windows"), {
        "now": now, "window_s": opts.window_s, "stab_s": opts.stabilization_s, "app": app, "stage": stage,
    }).mappings().all()
    out = []
    for r in rows:
        stats = StageStats(
            stage_id=r["stage_id"], app=r["app"], pool=r["pool"], cores=r["cores"], min_cores=r["min_cores"],
            max_cores=r["max_cores"], state_partitions=r["state_partitions"], span_s=r["span_s"],
            batches=r["batches"], input_rows=int(r["input_rows"]), busy_ms=r["busy_ms"],
            backlog_rows=r["backlog_rows"], backlog_growth_rps=r["backlog_growth_rps"],
            latency_p95_ms=r["latency_p95_ms"], state_bytes=r["state_bytes"],
            extra={"latency_avg_p95_ms": r["latency_avg_p95_ms"]},
        )
        out.append((stats, r["policy"] or {}))
    return out


def _pool_rooms(conn: Connection) -> dict[str, dict[str, PoolRoom]]:
    """For each pool, the other pools with their free cores and network delay from it."""
    pools = conn.execute(text(
        "SELECT p.name, p.cores, p.network_delay_ms, COALESCE(u.used, 0) AS used FROM pools p LEFT JOIN "
        "(SELECT pool, sum(cores) AS used FROM deployments WHERE status IN ('starting','running','stopping') "
        "GROUP BY pool) u ON u.pool = p.name")).mappings().all()
    return {
        p["name"]: {
            q["name"]: PoolRoom(free_cores=q["cores"] - q["used"], delay_ms=float(p["network_delay_ms"].get(q["name"], 1e6)))
            for q in pools if q["name"] != p["name"]
        }
        for p in pools
    }


def operator_pass(conn: Connection, now: datetime, app: str | None = None, stage: str | None = None,
                  host: tuple[float, float] | None = None, base: OperatorOptions | None = None) -> tuple[int, list[Request]]:
    """Run the Operator Manager of every live stage (of `app`, or just `stage`) and upsert its requests."""
    base = base or OperatorOptions()
    windows = load_windows(conn, now, base, app, stage)
    if not windows:
        return 0, []
    cpu, mem = host or host_utilization()
    cost = CostModel(Observation(**r) for r in conn.execute(db.query("cost_history")).mappings())
    rooms = _pool_rooms(conn)
    states = {r.stage_id: OperatorState(r.prestaged) for r in conn.execute(db.query("operator_state_get"))}
    r_max = dict(conn.execute(text("SELECT name, r_max_ms FROM apps")).all())
    requests: list[Request] = []
    for stats, policy in windows:
        opts = OperatorOptions.from_params(policy.get("params"))
        stats = StageStats(**{**stats.__dict__, "host_cpu": cpu, "host_mem": mem})
        ctx = OperatorContext(r_max_ms=float(r_max[stats.app]), cost=cost, pools=rooms.get(stats.pool, {}),
                              rng=random.Random(f"{stats.stage_id}:{now.isoformat()}"))
        before = states.get(stats.stage_id, OperatorState())
        reqs, after = operator_cycle(policy.get("kind", "threshold3"), stats, opts, before, ctx)
        if after != before:
            conn.execute(db.query("operator_state_save"), {"stage_id": stats.stage_id, "prestaged": after.prestaged})
        for r in reqs:
            rid = conn.execute(db.query("request_upsert"), {
                "stage_id": r.stage_id, "app": r.app, "action": r.action, "target_cores": r.target_cores,
                "target_pool": r.target_pool, "gain": r.gain, "cost_ms": r.cost_ms, "reason": r.reason,
                "snapshot": json.dumps(r.snapshot, default=str), "policy": policy.get("kind", "threshold3"),
            }).scalar_one()
            log.info("stage %s: action=request %s → %s (%s)", r.stage_id, r.action, r.target_cores or r.target_pool, r.reason)
            requests.append(Request(**{**r.__dict__, "id": rid}))
    return len(windows), requests


def app_response_ms(windows: list[StageStats]) -> float | None:
    """Response time of an app: the sum of its stages' p95 latencies (the critical path of a chain)."""
    lat = [w.extra.get("latency_avg_p95_ms") for w in windows if w.extra.get("latency_avg_p95_ms") is not None]
    return sum(lat) if lat else None


def _request_row(r) -> Request:
    return Request(r.stage_id, r.action, r.target_cores, r.target_pool, r.gain, r.cost_ms, r.reason,
                   r.snapshot or {}, app=r.app, id=r.id)


def application_pass(conn: Connection, app_row, now: datetime, windows: list[StageStats], dry_run: bool,
                     decided_by: str) -> AppCycle:
    name = app_row.name
    # Two concurrent re-plans of one app serialize here; the second sees the first's result.
    conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('replan:' || :a))"), {"a": name})
    opts = AppOptions.from_params(app_row.control)
    mw = app_row.maintenance_window
    view = AppView(name, app_row.r_max_ms, mw["cron"], mw["duration_min"], mw.get("max_actions", 2))
    row = conn.execute(db.query("app_control_get"), {"app": name}).first()
    state = AppState(row.tokens, row.window_start, row.window_actions) if row else AppState(tokens=opts.capacity)
    conn.execute(db.query("requests_withdraw_stale"), {"app": name, "stale_s": STALE_REQUEST_S})
    requests = [_request_row(r) for r in conn.execute(db.query("requests_open"), {"app": name, "stale_s": STALE_REQUEST_S})]
    response = app_response_ms(windows)
    growing = any(w.backlog_growth_rps > 0 for w in windows)
    decisions, new_state = application_cycle(view, opts, state, requests, response, growing, now)
    result = AppCycle(name, tokens=new_state.tokens, response_ms=response)
    policy = opts.policy if opts.policy == "accept_all" else f"token_bucket(B={opts.capacity:g}, beta={opts.beta:g}, {opts.generator})"
    for d in decisions:
        r = d.request
        did = conn.execute(db.query("decision_insert"), {
            "app": name, "request_id": r.id, "stage_id": r.stage_id, "action": r.action, "outcome": d.outcome,
            "reason": d.reason, "policy": policy, "tokens_before": d.tokens_before, "tokens_after": d.tokens_after,
            "defer_until": d.defer_until, "urgent": d.urgent, "response_ms": response, "dry_run": dry_run,
            "decided_by": decided_by,
        }).scalar_one()
        reconf_id = None
        if not dry_run:
            status = {"granted": "granted", "declined": "declined", "deferred": "deferred"}[d.outcome]
            conn.execute(db.query("request_close"), {"id": r.id, "status": status})
            if d.outcome == "granted" and r.action in RECONFIGURATIONS:
                reconf_id = conn.execute(db.query("reconfiguration_plan"), {
                    "stage_id": r.stage_id, "app": name, "action": r.action, "target_cores": r.target_cores,
                    "target_pool": r.target_pool, "request_id": r.id, "decision_id": did, "state_bytes": int(r.snapshot.get("state_bytes") or 0),
                }).scalar()
                if reconf_id is None:
                    log.info("stage %s: grant %d is moot: a reconfiguration is already pending or running", r.stage_id, did)
        log.info("app %s: action=decide %s %s %s: %s", name, r.stage_id, r.action, d.outcome, d.reason)
        result.decisions.append((d, reconf_id))
    if not dry_run:
        conn.execute(db.query("app_control_save"), {
            "app": name, "tokens": new_state.tokens, "window_start": new_state.window_start,
            "window_actions": new_state.window_actions, "response_ms": response,
        })
    return result


def replan(app: str | None = None, *, dry_run: bool = False, operators: bool = True, now: datetime | None = None,
           decided_by: str = "replan", host: tuple[float, float] | None = None) -> CycleReport:
    """One cycle: Operator Managers of the app's live stages, then the Application Manager of each app.
    `dry_run` is recommend-only: requests and decisions are recorded (decisions marked dry_run);
    no request is closed, no token spent and no reconfiguration planned."""
    now = now or datetime.now(timezone.utc)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    with db.engine().begin() as conn:
        apps = conn.execute(db.query("apps_control"), {"app": app}).all()
        if app and not apps:
            raise LookupError(f"no app {app!r} in the database; run `streamops deploy {app}` first")
        n_stages, requests = operator_pass(conn, now, app=app, host=host) if operators else (0, [])
        timings["operators_s"] = time.perf_counter() - t0
        windows = load_windows(conn, now, OperatorOptions(), app)
        by_app: dict[str, list[StageStats]] = {}
        for w, _ in windows:
            by_app.setdefault(w.app, []).append(w)
        t1 = time.perf_counter()
        results = [application_pass(conn, a, now, by_app.get(a.name, []), dry_run, decided_by) for a in apps]
        timings["applications_s"] = time.perf_counter() - t1
    timings["total_s"] = time.perf_counter() - t0
    return CycleReport(n_stages, requests, results, timings)


def to_rows(report: CycleReport) -> list[dict[str, Any]]:
    rows = []
    for a in report.apps:
        for d, reconf in a.decisions:
            rows.append({
                "app": a.app, "stage": d.request.stage_id, "action": d.request.action,
                "target": d.request.target_cores if d.request.target_pool is None else d.request.target_pool,
                "outcome": d.outcome, "reason": d.reason, "gain": d.request.gain, "cost_ms": d.request.cost_ms,
                "tokens": f"{d.tokens_before:g}→{d.tokens_after:g}", "reconfiguration": reconf,
                "defer_until": d.defer_until,
            })
    return rows


__all__ = ["replan", "operator_pass", "load_windows", "CycleReport", "to_rows", "LOCAL"]
