"""What each Airflow task does: one function per task, called with the task's Params.

The DAG files stay thin (a schedule, Params, one call here per task). These functions log each
step with the stage and the action, return a small JSON-able summary (the task's XCom), and
raise with a clear message when the platform did not do what was asked, so that the task,
and the run, fail visibly in the UI.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypedDict

from streamops import registry
from streamops.plan.kinds import Action, MechanismName

if TYPE_CHECKING:
    from streamops.execute.reconfigure import Outcome

log = logging.getLogger("streamops.airflow")

RESUME_PENDING = "resume_pending"  # realize what re-plan granted (its reconfiguration id, or the stage's pending one)
ACTIONS = (*map(str, Action), RESUME_PENDING)  # the form's choices, spelled as stored


def _say(msg: str) -> None:
    log.info("%s", msg)


# -- Param choices (read at DAG parse time: registry only, no Spark, no database) -------------
class Choices(TypedDict):
    apps: list[str]
    stages: list[str]
    pools: list[str]
    mechanisms: list[str]
    max_cores: int
    cores_bounds: str


def choices() -> Choices:
    """Apps, stages, pools and mechanisms, for the trigger forms' enums."""
    from streamops.execute.mechanisms import MECHANISMS

    reg = registry.load()
    return {
        "apps": sorted(reg.apps),
        "stages": sorted(registry.stage_id(a, s) for a, s, _ in reg.stages()),
        "pools": sorted(reg.pools),
        "mechanisms": [str(MechanismName.AUTO), *map(str, MECHANISMS)],
        # The form's cores field: the widest bound; each stage's own is checked by the task.
        "max_cores": max((st.cores.max for _, _, st in reg.stages()), default=1),
        "cores_bounds": ", ".join(f"{registry.stage_id(a, s)} {st.cores.min}–{st.cores.max}"
                                  for a, s, st in sorted(reg.stages(), key=lambda x: (x[0], x[1]))),
    }


# -- streamops_deploy -------------------------------------------------------------------------
def _refuse_parquet_replicas(reg: registry.Registry, app: str) -> None:
    """The replicas Param must not do what apps.yaml may not (registry._parquet_replicas)."""
    for a, s, st in reg.stages():
        if a == app and st.sink.kind == "parquet":
            raise ValueError(f"replicas: stage {registry.stage_id(a, s)} has a parquet sink, which runs one "
                             "replica (its drivers would replace the same batch directories unfenced)")


def deploy(app: str, restart: bool = False, wait_s: float = 240,
           replicas_override: int | None = None) -> dict[str, Any]:
    """Validate and sync the registry, then make sure every stage of `app` runs. A running stage
    is left alone unless `restart`; a stage that is not running starts in its configured pool
    (from apps.yaml) from its checkpoint, at the size its input needs, its last size or
    `cores.initial`, whichever is most (`plan.start_size`). `replicas_override` sets every stage's replica
    count instead of apps.yaml's (until the next deploy without it)."""
    from streamops.execute import replicas, stages, watchdog

    reg = registry.load()
    if replicas_override is not None and not 1 <= replicas_override <= 4:
        raise ValueError(f"replicas must be between 1 and 4, got {replicas_override}")
    if replicas_override and replicas_override > 1:
        _refuse_parquet_replicas(reg, app)
    # The override stays through every later sync (each start, each failover) until the next deploy.
    synced = stages.sync_registry(reg, [app], replicas_override=replicas_override, set_override=True)
    watchdog.clear_health(synced)  # a deploy puts a given-up stage back under the watchdog
    _say(f"app {app}: action=sync registry synced, stages {', '.join(synced)}")
    result = {}
    for sid in synced:
        _, _, st = reg.stage(sid)
        if restart:
            with contextlib.suppress(stages.StageNotRunning):
                replicas.stop_with_replicas(sid, reg, requested_by="airflow:streamops_deploy", progress=_say)
        res = stages.start_stage(sid, reg, pool=st.pool, wait_s=wait_s, progress=_say)
        if res.already_running and (done := upgrade_changed(reg, [sid], progress=_say)):
            o = done[0]
            result[sid] = {"deployment": res.deployment_id, "action": f"upgrade {o.status}",
                           "reconfiguration": o.reconfiguration_id}
            if o.status != "done":
                raise RuntimeError(f"stage {sid}: upgrade {o.status}: {o.detail}")
        elif res.already_running:
            _say(f"stage {sid}: action=deploy already running (deployment {res.deployment_id}); left alone")
            result[sid] = {"deployment": res.deployment_id, "action": "left running"}
        else:
            _say(f"stage {sid}: action=deploy running (deployment {res.deployment_id}, pool {st.pool})")
            result[sid] = {"deployment": res.deployment_id, "action": "restarted" if restart else "started"}
    # An HA stage's other replicas, now that its primary runs (the supervisor keeps them up).
    started = replicas.reconcile(reg, wait_s=wait_s, progress=_say).started
    for item in started:
        sid, role = item.split(" ", 1)
        result.setdefault(sid, {}).setdefault("replicas_started", []).append(role)
    return result


def upgrade_changed(reg: registry.Registry, stage_ids: list[str], mechanism: str = "auto",
                    progress=lambda _: None) -> list:
    """Each running stage whose job or code differs from its run's (`stages.code_change`) is
    upgraded: an `upgrade` reconfiguration through the usual mechanism path and quality gate
    (active backup when the pool has room beside the run). The outcomes, one per upgraded stage."""
    from streamops import quality
    from streamops.execute import reconfigure, stages

    outcomes = []
    for sid in stage_ids:
        what = stages.code_change(sid, reg)
        if what is None:
            continue
        progress(f"stage {sid}: action=upgrade ({what})")
        rid = reconfigure.request(sid, "upgrade", mechanism=mechanism, reg=reg, requested_by="deploy")
        o = reconfigure.execute_requested(rid, gate=quality.gate_new_run, reg=reg, progress=progress)
        gap = "–" if o.downtime_ms is None else f"{o.downtime_ms / 1000:.1f} s"
        progress(f"stage {sid}: action=upgrade {o.status} (reconfiguration {rid}, output gap {gap}): {o.detail}")
        outcomes.append(o)
    return outcomes


# -- streamops_replan -------------------------------------------------------------------------
def replan_apps() -> list[str]:
    """The apps a re-plan covers: those synced into the database (deployed at least once)."""
    from streamops.store import db

    return [r.name for r in db.rows("apps_deployed")]


def replan(app: str) -> list[dict[str, Any]]:
    """One Application Manager cycle for `app` (its stages' Operator Managers first). Local
    grants (pre-stage, release) are realized here; granted scale-outs and live scale-ins are
    returned as confs for `streamops_reconfigure`; disruptive grants stay pending for the
    maintenance window."""
    from streamops import control
    from streamops.execute import staging

    report = control.replan(app, decided_by="airflow:streamops_replan")
    _say(f"app {app}: action=replan {report.stages_analyzed} stage window(s), {len(report.requests)} request(s), "
         f"{report.seconds['total_s'] * 1000:.0f} ms")
    realize = []
    for r in control.to_rows(report):
        _say(f"stage {r['stage']}: action=decide {r['action']} → {r['outcome']}: {r['reason']}"
             + (f" (reconfiguration {r['reconfiguration']} pending)" if r["reconfiguration"] else ""))
        if r["outcome"] != "granted":
            continue
        if r["action"] == "prestage":
            try:
                staged = staging.prestage(r["stage"], None, progress=_say)
                _say(f"stage {r['stage']}: action=prestage staged as of batch {staged.as_of_batch}")
            except (RuntimeError, ValueError) as e:
                log.warning("stage %s: action=prestage failed: %s", r["stage"], e)
        elif r["action"] == "release_prestage":
            staging.release(r["stage"])
            _say(f"stage {r['stage']}: action=release staged copy discarded")
        elif (r["action"] == Action.SCALE_OUT or r["live"]) and r["reconfiguration"]:  # live scale-ins: now
            realize.append({"stage": r["stage"], "action": RESUME_PENDING, "reconfiguration": r["reconfiguration"]})
    return realize


# -- streamops_reconfigure --------------------------------------------------------------------
def realize_action(stage: str | None, action: str, *, reg: registry.Registry, progress: Callable[[str], None] = _say,
                   cores: int | None = None, partitions: int | None = None, pool: str | None = None,
                   mechanism: str = MechanismName.AUTO, requested_by: str | None = None,
                   reconfiguration: int | None = None, wait: bool = True) -> list[Outcome]:
    """The one front door of a reconfiguration, for this DAG's task and `streamops reconfigure`:
    `resume_pending` realizes `reconfiguration` (the id re-plan granted), or without one the
    pending or left-running ones of `stage` (None: of every stage); any other action is recorded
    as pending and, with `wait`, realized now. The outcomes (none when only recorded)."""
    from streamops import quality
    from streamops.execute import reconfigure

    if action.strip().replace("-", "_") == RESUME_PENDING:
        if reconfiguration is not None:
            return [reconfigure.realize(reconfiguration, gate=quality.gate_new_run, reg=reg, progress=progress,
                                        stage_id=stage)]
        return reconfigure.resume(reg, progress=progress, gate=quality.gate_new_run,
                                  stage_ids=None if stage is None else [stage])
    if stage is None:
        raise ValueError(f"{action} needs a stage")
    rid = reconfigure.request(stage, action, cores=cores, partitions=partitions, pool=pool, mechanism=mechanism,
                              reg=reg, requested_by=requested_by)
    progress(f"stage {stage}: action={action} reconfiguration {rid} recorded as pending")
    if not wait:
        return []
    return [reconfigure.execute_requested(rid, gate=quality.gate_new_run, reg=reg, progress=progress)]


def reconfigure(stage: str, action: str, cores: int | None = None, partitions: int | None = None,
                pool: str | None = None, mechanism: str = MechanismName.AUTO,
                requested_by: str = "user:airflow-ui", reconfiguration: int | None = None) -> dict[str, Any]:
    """Realize one reconfiguration of `stage` (`realize_action`) and log every phase. Raises
    unless it ends `done`."""
    action = action.strip().replace("-", "_")  # the older spelling (scale-out) still arrives from scripts
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {', '.join(ACTIONS)}, got {action!r}")
    outcomes = realize_action(stage, action, reg=registry.load(), cores=cores, partitions=partitions, pool=pool,
                              mechanism=mechanism, requested_by=requested_by, reconfiguration=reconfiguration)
    if not outcomes:
        _say(f"stage {stage}: action=resume_pending nothing pending or left running")
        return {"stage": stage, "reconfigurations": []}
    summary = []
    for o in outcomes:
        gap = "–" if o.downtime_ms is None else f"{o.downtime_ms / 1000:.1f}s"
        _say(f"stage {o.stage_id}: action=reconfigure reconfiguration {o.reconfiguration_id} {o.status}: "
             f"output gap (downtime) {gap}, took {o.seconds:.1f}s; {o.detail}")
        summary.append({"id": o.reconfiguration_id, "status": str(o.status), "downtime_ms": o.downtime_ms,
                        "seconds": round(o.seconds, 1), "detail": o.detail})
    bad = [s for s in summary if s["status"] != "done"]
    if bad:
        raise RuntimeError(f"stage {stage}: reconfiguration(s) not done: "
                           + "; ".join(f"{b['id']} {b['status']}: {b['detail']}" for b in bad))
    return {"stage": stage, "reconfigurations": summary}


# -- streamops_maintenance_window -------------------------------------------------------------
def open_windows(now: datetime | None = None) -> dict[str, datetime]:
    """Apps whose maintenance window is open now → when it closes."""
    from datetime import timedelta

    from streamops.plan.application import AppView, maintenance_window

    now = now or datetime.now(UTC)
    reg = registry.load()
    out = {}
    for name in replan_apps():
        if name not in reg.apps:
            continue
        mw = reg.apps[name].maintenance_window
        view = AppView(name, reg.apps[name].r_max_ms, mw.cron, mw.duration_min, mw.max_actions)
        w = maintenance_window(view, now)
        if w.open and w.start is not None:  # an open window has a start
            out[name] = w.start + timedelta(minutes=mw.duration_min)
    return out


def _before(deadline: datetime) -> bool:
    return datetime.now(UTC) < deadline


def maintenance_window(now: datetime | None = None) -> dict[str, Any]:
    """Realize the deferred (now granted and pending) scale-ins and migrations of every app whose
    window is open, one at a time, and start nothing once the window has closed."""
    from streamops import quality
    from streamops.execute import reconfigure

    windows = open_windows(now)
    if not windows:
        _say("action=maintenance-window no app's window is open now: nothing to do")
        return {}
    done: dict[str, list] = {}
    reg = registry.load()
    for app, closes in windows.items():
        _say(f"app {app}: action=maintenance-window open until {closes:%H:%M} UTC")
        outcomes = reconfigure.resume(reg, progress=_say, gate=quality.gate_new_run, statuses=("pending",), apps=[app],
                                     actions=("scale_in", "migrate"),
                                     keep_going=functools.partial(_before, closes))
        for o in outcomes:
            _say(f"stage {o.stage_id}: action=reconfigure reconfiguration {o.reconfiguration_id} {o.status}, "
                 f"output gap {'–' if o.downtime_ms is None else f'{o.downtime_ms / 1000:.1f}s'}")
        done[app] = [{"id": o.reconfiguration_id, "stage": o.stage_id, "status": o.status} for o in outcomes]
    return done


# -- streamops_watchdog -----------------------------------------------------------------------
def watchdog(max_restarts: int = 3, stale_s: float = 60.0, wait_s: float = 180) -> dict[str, Any]:
    """Recover failed stages; fail (an alert in the UI) while any stage is given up on."""
    from streamops.execute import supervisor
    from streamops.execute import watchdog as wd

    supervisor.ensure_running(progress=_say)
    report = wd.cycle(stale_s=stale_s, max_restarts=max_restarts, wait_s=wait_s, progress=_say)
    for o in report.reconfigurations:
        _say(f"stage {o.stage_id}: action=resume reconfiguration {o.reconfiguration_id} left by a dead executor: "
             f"{o.status}")
    for s in report.skipped:
        _say(f"action=skip {s}")
    _say(f"action=watchdog {report.checked} healthy stage(s) checked, {len(report.recoveries)} failure(s) handled")
    failed = wd.failed_stages()
    if failed:
        raise wd.WatchdogAlert("ALERT: stage(s) given up after repeated failed restarts; fix and redeploy them: "
                               + "; ".join(f"{s}: {why}" for s, why in failed))
    return {"checked": report.checked,
            "recoveries": [r.__dict__ for r in report.recoveries],
            "reconfigurations": [o.reconfiguration_id for o in report.reconfigurations],
            "spark_workers_restarted": report.workers_restarted,
            "replicas": report.replicas.__dict__ if report.replicas else {}}
