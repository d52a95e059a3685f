"""One control cycle against PostgreSQL: monitor → analyze → plan (→ execute, later).

    stage windows (one SQL pass) → Operator Managers → requests (refreshed, never duplicated)
    → Application Managers, under per-app advisory locks → decisions → pending reconfigurations

The maths is in `analyze` and `plan` (pure); this module only reads and writes, and does so
set-based: a fixed number of statements per cycle whatever the number of stages and apps.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any

import psutil
from sqlalchemy import Connection, Row

from streamops.analyze.stats import StageStats, useful_cores
from streamops.forecast_pass import with_forecasts
from streamops.plan.application import AppView, application_cycle
from streamops.plan.change import Current, StageNow, grant_refusal
from streamops.plan.cost import CostModel, Observation
from streamops.plan.model import RECONFIGURATIONS, REPLICA_ACTIONS, AppState, Decision, OperatorState, Request
from streamops.plan.operator import OperatorContext, PoolRoom, operator_cycle
from streamops.plan.options import AppOptions, OperatorOptions
from streamops.plan.stability import LastChange, StageFacts, draining
from streamops.redundancy_pass import redundancy_requests
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


@dataclass
class CycleReport:
    stages_analyzed: int
    requests: list[Request]
    apps: list[AppCycle]
    seconds: dict[str, float]


def host_utilization() -> tuple[float, float]:
    """U_r and memory use of this host: the local pools' hosts."""
    return psutil.cpu_percent(interval=0.2) / 100.0, psutil.virtual_memory().percent / 100.0


def _fields(obj) -> dict[str, Any]:
    """A dataclass's fields as a dict, shallow (asdict would deep-copy every snapshot)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


# -- monitor / analyze ---------------------------------------------------------------------------
def load_windows(conn: Connection, now: datetime, opts: OperatorOptions, app: str | None = None,
                 stage: str | None = None) -> list[tuple[StageStats, dict]]:
    floor = conn.execute(db.query("window_floor"), {"now": now, "window_s": opts.window_s, "app": app}).scalar_one()
    conn.execute(db.query("windows_tuning"))
    rows = conn.execute(db.query("stage_windows"), {
        "now": now, "floor": floor, "window_s": opts.window_s, "stab_s": opts.stabilization_s, "app": app,
        "stage": stage,
    }).mappings().all()
    return with_forecasts(conn, now, [(  # stages with `forecast: true` get their forecast_rate
        StageStats(
            stage_id=r["stage_id"], app=r["app"], pool=r["pool"], cores=r["cores"], min_cores=r["min_cores"],
            max_cores=r["max_cores"], state_partitions=r["state_partitions"], span_s=r["span_s"],
            batches=r["batches"], input_rows=int(r["input_rows"]), busy_ms=r["busy_ms"],
            backlog_rows=r["backlog_rows"], backlog_growth_rps=r["backlog_growth_rps"],
            latency_p95_ms=r["latency_p95_ms"], state_bytes=r["state_bytes"],
            extra={"latency_avg_p95_ms": r["latency_avg_p95_ms"]},
            max_useful_cores=useful_cores(r["source_partitions"], r["min_partitions"]),
        ),
        r["policy"] or {},
    ) for r in rows])


def _pool_rooms(conn: Connection) -> dict[str, dict[str, PoolRoom]]:
    """For each pool, the other pools with their free cores and network delay from it."""
    pools = conn.execute(db.query("pool_rooms")).mappings().all()
    return {
        p["name"]: {
            q["name"]: PoolRoom(free_cores=q["cores"] - q["used"],
                                delay_ms=float(p["network_delay_ms"].get(q["name"], 1e6)))
            for q in pools if q["name"] != p["name"]
        }
        for p in pools
    }


# -- plan, locally -------------------------------------------------------------------------------
def operator_pass(conn: Connection, now: datetime, app: str | None = None, stage: str | None = None,
                  host: tuple[float, float] | None = None,
                  windows: list[tuple[StageStats, dict]] | None = None) -> tuple[int, list[Request]]:
    """Run the Operator Manager of every live stage (of `app`, or just `stage`) and upsert its requests."""
    windows = load_windows(conn, now, OperatorOptions(), app, stage) if windows is None else windows
    if not windows:
        return 0, []
    cpu, mem = host or host_utilization()
    history = conn.execute(db.query("cost_history")).mappings().all()
    cost = CostModel(Observation(r["stage_id"], r["action"], float(r["state_bytes"]), float(r["downtime_ms"]),
                                 r["mechanism"], float(r["catch_up_ms"])) for r in reversed(history))  # oldest first
    rooms = _pool_rooms(conn)
    states = {r.stage_id: OperatorState(r.prestaged) for r in conn.execute(db.query("operator_state_get"))}
    apps = {name: (float(r_max), max(1, int(n))) for name, r_max, n in conn.execute(db.query("apps_r_max")).all()}
    requests: list[tuple[Request, str]] = []
    changed_states: list[dict] = []
    rng = random.Random(now.isoformat())  # migration targets: random but reproducible per cycle
    for stats, policy in windows:
        kind = policy.get("kind", "threshold3")
        opts = OperatorOptions.from_params(policy.get("params"))
        stats = replace(stats, host_cpu=cpu, host_mem=mem)
        r_max, n_stages = apps[stats.app]
        ctx = OperatorContext(r_max_ms=r_max, cost=cost, pools=rooms.get(stats.pool, {}), rng=rng, app_stages=n_stages)
        before = states.get(stats.stage_id, OperatorState())
        reqs, after = operator_cycle(kind, stats, opts, before, ctx)
        if after != before:
            changed_states.append({"stage_id": stats.stage_id, "prestaged": after.prestaged})
        requests += [(r, kind) for r in reqs]
    db.bulk("operator_states_save", changed_states, conn)
    if stage is None:  # the redundancy manager steps from the re-plan only, once per its period
        extra, saved = redundancy_requests(conn, now)
        requests += [(r, "redundancy") for r in extra if app is None or r.app == app]
        db.bulk("redundancy_state_save", saved, conn)
    ids = db.bulk("requests_upsert", [{**_fields(r), "snapshot": json.dumps(r.snapshot, default=str), "policy": kind}
                                      for r, kind in requests], conn)
    by_key = {(sid, action): rid for rid, sid, action in ids}
    out = [replace(r, id=by_key[(r.stage_id, r.action)]) for r, _ in requests]
    for r in out:
        log.info("stage %s: action=request %s → %s (%s)", r.stage_id, r.action, r.target_cores or r.target_pool,
                 r.reason)
    return len(windows), out


# -- plan, globally ------------------------------------------------------------------------------
def app_response_ms(windows: Iterable[StageStats]) -> float | None:
    """Response time of an app: the sum of its stages' p95 latencies (the critical path of a chain)."""
    lat: list[float] = [p95 for w in windows if (p95 := w.extra.get("latency_avg_p95_ms")) is not None]
    return sum(lat) if lat else None


def _policy_label(opts: AppOptions) -> str:
    if opts.policy == "accept_all":
        return "accept_all"
    return f"token_bucket(B={opts.capacity:g}, beta={opts.beta:g}, {opts.generator})"


def application_pass(conn: Connection, apps: Sequence[Row], now: datetime, windows: list[StageStats], dry_run: bool,
                     decided_by: str) -> list[AppCycle]:
    """Every Application Manager of `apps`: a fixed number of statements for any number of apps."""
    names = [a.name for a in apps]
    conn.execute(db.query("apps_lock"), {"apps": names})
    saved = {r.app: AppState(r.tokens, r.window_start, r.window_actions)
             for r in conn.execute(db.query("app_controls_get"), {"apps": names})}
    if not dry_run:
        conn.execute(db.query("requests_withdraw_stale"), {"apps": names, "now": now, "stale_s": STALE_REQUEST_S})
    open_by_app: dict[str, list[Request]] = {}
    for row in conn.execute(db.query("requests_open"), {"apps": names}):
        open_by_app.setdefault(row.app, []).append(Request(
            row.stage_id, row.action, row.target_cores, row.target_pool, row.gain, row.cost_ms, row.reason,
            row.snapshot or {}, app=row.app, id=row.id, made_at=row.refreshed_at, first_made_at=row.created_at))
    stages_now: dict[str, StageNow] = {}
    last_change: dict[str, LastChange] = {}
    for row in conn.execute(db.query("stages_now"), {"apps": names}):
        stages_now[row.stage_id] = StageNow(Current(row.cores, row.pool, row.state_partitions), row.in_flight,
                                            row.settled_at)
        if row.last_requested_at is not None:
            last_change[row.stage_id] = LastChange(row.last_requested_at, row.last_action, row.last_from_cores,
                                                   row.last_to_cores)
    windows_by_app: dict[str, list[StageStats]] = {}
    for w in windows:
        windows_by_app.setdefault(w.app, []).append(w)

    results, decision_rows, controls = [], [], []
    for a in apps:
        opts = AppOptions.from_params(a.control)
        mw = a.maintenance_window
        view = AppView(a.name, a.r_max_ms, mw["cron"], mw["duration_min"], mw.get("max_actions", 2))
        app_windows = windows_by_app.get(a.name, [])
        response = app_response_ms(app_windows)
        growing = any(w.backlog_growth_rps > 0 for w in app_windows)
        state = saved.get(a.name, AppState(tokens=opts.capacity))
        # Refused before the token bucket sees them: no token is spent on them (plan.change).
        refused: list[tuple[Request, str]] = []
        asking: list[Request] = []
        for req in open_by_app.get(a.name, []):
            why = grant_refusal(req, stages_now.get(req.stage_id))
            if why:
                refused.append((req, why))
            else:
                asking.append(req)
        facts = {w.stage_id: StageFacts(last_change.get(w.stage_id), draining(w.backlog_rows, w.input_rate, opts))
                 for w in app_windows}
        facts.update({sid: StageFacts(lc) for sid, lc in last_change.items() if sid not in facts})
        decisions, new_state = application_cycle(view, opts, state, asking, response, growing, now, facts)
        decisions = [Decision(req, "declined", why, new_state.tokens, new_state.tokens)
                     for req, why in refused] + decisions
        results.append(AppCycle(a.name, [(d, None) for d in decisions], new_state.tokens, response))
        label = _policy_label(opts)
        decision_rows += [{**_fields(d), "app": a.name, "request_id": d.request.id, "stage_id": d.request.stage_id,
                           "action": d.request.action, "policy": label, "response_ms": response, "dry_run": dry_run,
                           "decided_by": decided_by} for d in decisions]
        controls.append({"app": a.name, "tokens": new_state.tokens, "window_start": new_state.window_start,
                         "window_actions": new_state.window_actions, "last_cycle_at": now,
                         "last_response_ms": response})

    ids = [row[0] for row in db.bulk("decisions_insert", decision_rows, conn)]
    flat = [(res, i) for res in results for i in range(len(res.decisions))]
    if not dry_run:
        db.bulk("requests_close", [{"id": res.decisions[i][0].request.id, "status": res.decisions[i][0].outcome}
                                   for res, i in flat], conn)
        # A granted replica count is the stage's wanted count; the supervisor starts or stops replicas.
        db.bulk("stage_replicas_set", [
            {"stage_id": d.request.stage_id, "replicas": int(d.request.snapshot["target_replicas"])}
            for res in results for d, _ in res.decisions
            if d.outcome == "granted" and d.request.action in REPLICA_ACTIONS], conn)
        grants = [(res, i, ids[n]) for n, (res, i) in enumerate(flat)
                  if res.decisions[i][0].outcome == "granted"
                  and res.decisions[i][0].request.action in RECONFIGURATIONS]
        planned = dict((did, rid) for rid, did in db.bulk("reconfigurations_plan", [
            {**_fields(r), "app": res.app, "request_id": r.id, "decision_id": did,
             "state_bytes": int(r.snapshot.get("state_bytes") or 0)}
            for res, i, did in grants for r in [res.decisions[i][0].request]], conn))
        for res, i, did in grants:
            d = res.decisions[i][0]
            res.decisions[i] = (d, planned.get(did))
            if did not in planned:
                log.info("stage %s: grant %d is moot: a reconfiguration is already pending or running",
                         d.request.stage_id, did)
        db.bulk("app_controls_save", controls, conn)
    for res in results:
        for d, reconf in res.decisions:
            log.info("app %s: action=decide %s %s %s%s: %s", res.app, d.request.stage_id, d.request.action, d.outcome,
                     f" → reconfiguration {reconf}" if reconf else "", d.reason)
    return results


def request_for_stage(stage_id: str) -> list[Request]:
    """One stage's Operator Manager, on its own (the driver runs it every local period): its
    requests, upserted."""
    with db.transaction() as conn:  # the database's clock: the metrics rows' and the requests' (docs/ha.md)
        return operator_pass(conn, conn.execute(db.query("db_now")).scalar_one(), stage=stage_id)[1]


def replan(app: str | None = None, *, dry_run: bool = False, operators: bool = True, now: datetime | None = None,
           decided_by: str = "replan", host: tuple[float, float] | None = None) -> CycleReport:
    """One cycle: Operator Managers of the live stages, then the Application Manager of each app.
    `dry_run` is recommend-only: requests and decisions are recorded (decisions marked dry_run);
    no request is closed, no token spent and no reconfiguration planned."""
    now = now or db.now()  # the metrics rows and the requests are dated by the database's clock
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    with db.transaction() as conn:
        apps = conn.execute(db.query("apps_control"), {"app": app}).all()
        if app and not apps:
            raise LookupError(f"no app {app!r} in the database; run `streamops deploy {app}` first")
        windows = load_windows(conn, now, OperatorOptions(), app)
        timings["windows_s"] = time.perf_counter() - t0
        n_stages, requests = operator_pass(conn, now, app=app, host=host, windows=windows) if operators \
            else (len(windows), [])
        timings["operators_s"] = time.perf_counter() - t0 - timings["windows_s"]
        t1 = time.perf_counter()
        results = application_pass(conn, apps, now, [w for w, _ in windows], dry_run, decided_by)
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
