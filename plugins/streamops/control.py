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
from streamops.budget_pass import app_budgets
from streamops.forecast_pass import with_forecasts
from streamops.plan.application import AppView, application_cycle
from streamops.plan.change import Current, StageNow, grant_refusal, live_scale_in
from streamops.plan.cost import CostModel, Observation
from streamops.plan.kinds import MechanismName
from streamops.plan.model import RECONFIGURATIONS, REPLICA_ACTIONS, AppState, Decision, OperatorState, Request
from streamops.plan.operator import OperatorContext, PoolRoom, operator_cycle
from streamops.plan.options import AppOptions, OperatorOptions
from streamops.plan.stability import LastChange, StageFacts, draining
from streamops.redundancy_pass import redundancy_requests
from streamops.registry import MaintenanceWindow, Policy, stored, stored_control
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
                 stage: str | None = None) -> list[tuple[StageStats, Policy]]:
    """Each live stage's window, with its policy typed once here (`opts`: the default window)."""
    floor = conn.execute(db.query("window_floor"), {"now": now, "window_s": opts.window_s, "app": app}).scalar_one()
    conn.execute(db.query("windows_tuning"))
    rows = conn.execute(db.query("stage_windows"), {
        "now": now, "floor": floor, "window_s": opts.window_s, "stab_s": opts.stabilization_s,
        "recent_s": opts.recent_s, "app": app, "stage": stage,
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
            recent_arrival_rate=r["recent_arrival_rps"],
        ),
        stored(Policy, r["policy"]),
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
                  windows: list[tuple[StageStats, Policy]] | None = None) -> tuple[int, list[Request]]:
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
    # each app's error budget, mpc's price (a stage's own pass: the one the last re-plan stored)
    budgets = app_budgets(conn, now, app, stage_app=windows[0][0].app if stage else None)
    requests: list[tuple[Request, str]] = []
    changed_states: list[dict] = []
    rng = random.Random(now.isoformat())  # migration targets: random but reproducible per cycle
    for stats, policy in windows:
        kind, opts = policy.kind, policy.params
        stats = replace(stats, host_cpu=cpu, host_mem=mem)
        r_max, n_stages = apps[stats.app]
        ctx = OperatorContext(r_max_ms=r_max, cost=cost, pools=rooms.get(stats.pool, {}), rng=rng, app_stages=n_stages,
                              budget=budgets.get(stats.app))
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


@dataclass(frozen=True)
class _OpenWork:
    """What the apps' cycles read, one statement each whatever the number of apps."""

    saved: dict[str, AppState]
    open_by_app: dict[str, list[Request]]
    stages_now: dict[str, StageNow]
    last_change: dict[str, LastChange]


def _open_work(conn: Connection, names: list[str], now: datetime, dry_run: bool) -> _OpenWork:
    saved = {r.app: AppState(r.tokens, r.window_start, r.window_actions)
             for r in conn.execute(db.query("app_controls_get"), {"apps": names})}
    if not dry_run:
        conn.execute(db.query("requests_withdraw_stale"), {"apps": names, "now": now, "stale_s": STALE_REQUEST_S})
    open_by_app: dict[str, list[Request]] = {}
    for r in conn.execute(db.query("requests_open"), {"apps": names}):
        open_by_app.setdefault(r.app, []).append(Request(
            r.stage_id, r.action, r.target_cores, r.target_pool, r.gain, r.cost_ms, r.reason,
            r.snapshot or {}, app=r.app, id=r.id, made_at=r.refreshed_at, first_made_at=r.created_at))
    stages_now: dict[str, StageNow] = {}
    last_change: dict[str, LastChange] = {}
    for s in conn.execute(db.query("stages_now"), {"apps": names}):
        kind = "local" if (s.pool_master or "local").startswith("local") else "standalone"  # registry.Pool.kind
        stages_now[s.stage_id] = StageNow(Current(s.cores, s.pool, s.state_partitions), s.in_flight, s.settled_at,
                                          kind, s.executor_cores or 1)
        if s.last_requested_at is not None:
            last_change[s.stage_id] = LastChange(s.last_requested_at, s.last_action, s.last_from_cores,
                                                 s.last_to_cores)
    return _OpenWork(saved, open_by_app, stages_now, last_change)


@dataclass(frozen=True)
class _AppDecided:
    app: str
    decisions: list[Decision]
    state: AppState
    response_ms: float | None
    policy: str  # its label, as the decisions rows record it


def _decide_app(a: Row, work: _OpenWork, app_windows: list[StageStats], now: datetime) -> _AppDecided:
    """One Application Manager's cycle; requests plan.change refuses are declined before the
    token bucket sees them, so no token is spent on them."""
    opts = stored_control(a.control)
    mw = stored(MaintenanceWindow, a.maintenance_window)
    view = AppView(a.name, a.r_max_ms, mw.cron, mw.duration_min, mw.max_actions)
    response = app_response_ms(app_windows)
    growing = any(w.backlog_growth_rps > 0 for w in app_windows)
    state = work.saved.get(a.name, AppState(tokens=opts.capacity))
    refused: list[tuple[Request, str]] = []
    asking: list[Request] = []
    for req in work.open_by_app.get(a.name, []):
        stage_now = work.stages_now.get(req.stage_id)
        why = grant_refusal(req, stage_now)
        if why:
            refused.append((req, why))
        else:
            asking.append(replace(req, live=live_scale_in(req, stage_now)))
    facts = {w.stage_id: StageFacts(work.last_change.get(w.stage_id), draining(w.backlog_rows, w.input_rate, opts))
             for w in app_windows}
    facts.update({sid: StageFacts(lc) for sid, lc in work.last_change.items() if sid not in facts})
    decisions, new_state = application_cycle(view, opts, state, asking, response, growing, now, facts)
    declined = [Decision(req, "declined", why, new_state.tokens, new_state.tokens) for req, why in refused]
    return _AppDecided(a.name, declined + decisions, new_state, response, _policy_label(opts))


def _record(conn: Connection, decided: list[_AppDecided], now: datetime, dry_run: bool,
            decided_by: str) -> dict[int | None, int]:
    """The decisions written, and (unless `dry_run`) acted on: requests closed, replica counts
    set, reconfigurations planned, tokens saved. Returns request id → planned reconfiguration id."""
    decision_of = {req_id: did for did, req_id in db.bulk("decisions_insert", [
        {**_fields(d), "app": o.app, "request_id": d.request.id, "stage_id": d.request.stage_id,
         "action": d.request.action, "policy": o.policy, "response_ms": o.response_ms, "dry_run": dry_run,
         "decided_by": decided_by} for o in decided for d in o.decisions], conn)}  # a request is decided once
    if dry_run:
        return {}
    db.bulk("requests_close", [{"id": d.request.id, "status": d.outcome} for o in decided for d in o.decisions], conn)
    granted = [(o.app, d.request) for o in decided for d in o.decisions if d.outcome == "granted"]
    # A granted replica count is the stage's wanted count; the supervisor starts or stops replicas.
    db.bulk("stage_replicas_set", [{"stage_id": r.stage_id, "replicas": int(r.snapshot["target_replicas"])}
                                   for _, r in granted if r.action in REPLICA_ACTIONS], conn)
    grants = [(app, r) for app, r in granted if r.action in RECONFIGURATIONS]
    by_decision = {did: rid for rid, did in db.bulk("reconfigurations_plan", [
        {**_fields(r), "app": app, "request_id": r.id, "decision_id": decision_of[r.id],
         "state_bytes": int(r.snapshot.get("state_bytes") or 0),
         # a live scale-in was granted outside the window for being live: it runs live or not at all
         "mechanism": MechanismName.LIVE if r.live else None} for app, r in grants], conn)}
    planned = {r.id: by_decision[decision_of[r.id]] for _, r in grants if decision_of[r.id] in by_decision}
    for _, r in grants:
        if r.id not in planned:
            log.info("stage %s: grant %d is moot: a reconfiguration is already pending or running",
                     r.stage_id, decision_of[r.id])
    db.bulk("app_controls_save", [
        {"app": o.app, "tokens": o.state.tokens, "window_start": o.state.window_start,
         "window_actions": o.state.window_actions, "last_cycle_at": now, "last_response_ms": o.response_ms}
        for o in decided], conn)
    return planned


def application_pass(conn: Connection, apps: Sequence[Row], now: datetime, windows: list[StageStats], dry_run: bool,
                     decided_by: str) -> list[AppCycle]:
    """Every Application Manager of `apps`: a fixed number of statements for any number of apps."""
    names = [a.name for a in apps]
    conn.execute(db.query("apps_lock"), {"apps": names})
    work = _open_work(conn, names, now, dry_run)
    windows_by_app: dict[str, list[StageStats]] = {}
    for w in windows:
        windows_by_app.setdefault(w.app, []).append(w)
    decided = [_decide_app(a, work, windows_by_app.get(a.name, []), now) for a in apps]
    planned = _record(conn, decided, now, dry_run, decided_by)
    results = [AppCycle(o.app, [(d, planned.get(d.request.id)) for d in o.decisions], o.state.tokens, o.response_ms)
               for o in decided]
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
                "defer_until": d.defer_until, "live": d.request.live,
            })
    return rows
