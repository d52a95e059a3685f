"""The watchdog: find failed stage runs, restart each from its checkpoint, measure the recovery.

A run has failed when its driver process is gone while the run is live (`dead_pid`), when it
is alive but has not beaten for `stale_s` (`stale_heartbeat`: it is killed first), or when
the driver recorded that a query died (`query_failed`). A stage a reconfiguration is working
on is skipped: its executor holds the stage lock and owns the restart (or the rollback).

Every failure is one `failures` row, written before the restart (persist first, then act).
The restart reuses the last run's cores, pool and checkpoint, so the replayable source and the
idempotent sink make the output the same as a failure-free run's. After `max_restarts` failed
restarts in a row the stage is marked `failed` and `WatchdogAlert` is raised.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from sqlalchemy import text

from streamops import registry
from streamops.execute import mechanisms, stages
from streamops.execute.launcher import launcher_for
from streamops.store import db

log = logging.getLogger("streamops.watchdog")


class WatchdogAlert(RuntimeError):
    """Stages the watchdog gave up on; the message names each with its last error."""


@dataclass(frozen=True)
class Failure:
    stage_id: str
    deployment_id: int
    kind: str
    detail: str
    failed_at: datetime


@dataclass
class Recovery:
    stage_id: str
    failure_id: int
    kind: str
    status: str  # recovered | retrying | gave_up
    attempts: int
    mttr_s: float | None = None
    downtime_s: float | None = None
    detail: str = ""


@dataclass
class WatchdogReport:
    checked: int = 0
    recoveries: list[Recovery] = field(default_factory=list)
    reconfigurations: list[mechanisms.Outcome] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def gave_up(self) -> list[Recovery]:
        return [r for r in self.recoveries if r.status == "gave_up"]


_CANDIDATES = text("""
    SELECT DISTINCT ON (d.stage_id) d.*, p.master, s.app, s.health, h.beat_at,
           EXTRACT(EPOCH FROM now() - COALESCE(h.beat_at, d.running_at, d.started_at)) AS silent_s
    FROM deployments d
    JOIN stages s ON s.stage_id = d.stage_id
    JOIN pools p ON p.name = d.pool
    LEFT JOIN heartbeats h ON h.deployment_id = d.id
    WHERE d.role = 'primary' AND d.status <> 'refused'
    ORDER BY d.stage_id, d.started_at DESC, d.id DESC
""")


def detect(stale_s: float = 60.0) -> list[Failure]:
    """The stages whose latest primary run has failed (and that the watchdog has not given up on)."""
    out = []
    with db.engine().connect() as conn:
        rows = conn.execute(_CANDIDATES).all()
    for d in rows:
        if d.health == "failed":
            continue
        launcher = launcher_for(d.master)
        # A run still `starting` without a pid is being launched right now: not a failure.
        if d.status in ("starting", "running", "stopping") and d.pid is not None \
                and not launcher.is_alive(d.pid, d.driver_id):
            out.append(Failure(d.stage_id, d.id, "dead_pid", f"driver pid {d.pid} is gone while the run is {d.status}",
                               d.beat_at or d.running_at or d.started_at))
        elif d.status == "running" and d.silent_s is not None and d.silent_s > stale_s:
            out.append(Failure(d.stage_id, d.id, "stale_heartbeat",
                               f"no heartbeat for {d.silent_s:.0f}s (limit {stale_s:.0f}s)", d.beat_at or d.running_at))
        elif d.status == "failed" and not (d.stop_reason or "").startswith("driver process gone"):
            out.append(Failure(d.stage_id, d.id, "query_failed", d.stop_reason or "the driver recorded a failure",
                               d.stopped_at or d.started_at))
        elif d.status == "failed":
            out.append(Failure(d.stage_id, d.id, "dead_pid", d.stop_reason, d.stopped_at or d.started_at))
    return out


def _open_failure(f: Failure, app: str) -> tuple[int, int]:
    """The stage's open failure row (created now if none): (id, restarts attempted so far)."""
    with db.engine().begin() as conn:
        row = conn.execute(text("SELECT id, attempts FROM failures WHERE stage_id = :s AND status = 'recovering'"),
                           {"s": f.stage_id}).first()
        if row:
            return row.id, row.attempts
        last_commit = conn.execute(db.query("last_commit_before"), {"stage_id": f.stage_id, "ts": f.failed_at}).scalar()
        fid = conn.execute(text("""
            INSERT INTO failures (stage_id, app, deployment_id, kind, detail, failed_at, last_commit_at)
            VALUES (:s, :app, :d, :kind, :detail, :failed_at, :last_commit) RETURNING id"""), {
            "s": f.stage_id, "app": app, "d": f.deployment_id, "kind": f.kind, "detail": f.detail[:2000],
            "failed_at": f.failed_at, "last_commit": last_commit}).scalar_one()
    log.warning("stage %s: action=failure-detected kind=%s failure=%d: %s", f.stage_id, f.kind, fid, f.detail)
    return fid, 0


def _wait_recovered(dep_id: int, wait_s: float) -> tuple[datetime | None, str | None]:
    """(the restarted run's first commit time, or its running time on an idle source; why not)."""
    with db.engine().connect() as conn:
        dep = conn.execute(db.query("deployment_get"), {"id": dep_id}).one()
    st = registry.Stage.model_validate(dep.config["spec"])
    at, _, why = mechanisms.wait_first_output(dep_id, wait_s, registry.resolve_path(st.source.path),
                                              Path(dep.checkpoint), who="the restarted run")
    return at, why


def recover(f: Failure, app: str, reg: registry.Registry, *, max_restarts: int = 3, wait_s: float = 180,
            progress=lambda _: None) -> Recovery:
    fid, attempts = _open_failure(f, app)
    launcher = launcher_for("local")
    with db.engine().begin() as conn:
        if f.kind == "stale_heartbeat":
            dep = conn.execute(db.query("deployment_get"), {"id": f.deployment_id}).one()
            launcher.terminate(dep.pid, force=True)  # a hung driver must not keep writing beside its successor
        conn.execute(db.query("deployment_finished"), {"id": f.deployment_id, "status": "failed",
                                                       "reason": f"watchdog: {f.detail}", "exit_code": None})
        conn.execute(text("UPDATE failures SET attempts = attempts + 1 WHERE id = :id"), {"id": fid})
    attempts += 1
    progress(f"{f.stage_id}: {f.kind}: {f.detail}; restart {attempts} of {max_restarts} from its checkpoint")
    why = None
    try:
        res = stages.start_stage(f.stage_id, reg, wait_s=min(wait_s, 240), progress=progress)
        recovered_at, why = _wait_recovered(res.deployment_id, wait_s)
    except Exception as e:  # any failed restart is one attempt; the next cycle tries again or gives up
        log.exception("stage %s: action=restart failed", f.stage_id)
        recovered_at, why, res = None, f"{type(e).__name__}: {e}", None
    if recovered_at is not None:
        with db.engine().begin() as conn:
            row = conn.execute(text("""
                UPDATE failures SET status = 'recovered', recovered_at = :at, closed_at = now(),
                       recovery_deployment_id = :dep,
                       mttr_ms = EXTRACT(EPOCH FROM CAST(:at AS timestamptz) - failed_at) * 1000,
                       downtime_ms = EXTRACT(EPOCH FROM CAST(:at AS timestamptz) - COALESCE(last_commit_at, failed_at)) * 1000
                WHERE id = :id RETURNING mttr_ms, downtime_ms"""), {"at": recovered_at, "dep": res.deployment_id, "id": fid}).one()
        log.info("stage %s: action=recovered failure=%d mttr=%.1fs downtime=%.1fs", f.stage_id, fid,
                 row.mttr_ms / 1000, row.downtime_ms / 1000)
        progress(f"{f.stage_id}: recovered (deployment {res.deployment_id}); MTTR {row.mttr_ms / 1000:.1f}s, "
                 f"output gap {row.downtime_ms / 1000:.1f}s")
        return Recovery(f.stage_id, fid, f.kind, "recovered", attempts, row.mttr_ms / 1000, row.downtime_ms / 1000)
    if attempts >= max_restarts:
        reason = f"{attempts} restarts in a row failed; last: {why}"
        with db.engine().begin() as conn:
            conn.execute(text("UPDATE failures SET status = 'gave_up', closed_at = now() WHERE id = :id"), {"id": fid})
            conn.execute(text("UPDATE stages SET health = 'failed', health_reason = :r WHERE stage_id = :s"),
                         {"r": reason[:2000], "s": f.stage_id})
        log.error("stage %s: action=give-up failure=%d: %s", f.stage_id, fid, reason)
        return Recovery(f.stage_id, fid, f.kind, "gave_up", attempts, detail=reason)
    log.warning("stage %s: action=restart-failed failure=%d attempt=%d: %s", f.stage_id, fid, attempts, why)
    return Recovery(f.stage_id, fid, f.kind, "retrying", attempts, detail=why or "")


def cycle(reg: registry.Registry | None = None, *, stale_s: float = 60.0, max_restarts: int = 3,
          wait_s: float = 180, progress=lambda _: None) -> WatchdogReport:
    """One watchdog pass: finish reconfigurations a dead executor left, then recover failed stages."""
    reg = reg or registry.load()
    report = WatchdogReport()
    # A crashed executor's `running` reconfiguration first: its rollback may be the recovery.
    report.reconfigurations = mechanisms.resume(reg, progress=progress, statuses=("running",))
    failures = detect(stale_s)
    with db.engine().connect() as conn:
        report.checked = conn.execute(text("SELECT count(*) FROM stages WHERE health = 'ok'")).scalar_one()
        running = {r.stage_id for r in conn.execute(text(
            "SELECT stage_id FROM reconfigurations WHERE status = 'running'"))}
        apps = dict(conn.execute(text("SELECT stage_id, app FROM stages")).all())
    for f in failures:
        try:
            reg.stage(f.stage_id)
        except registry.RegistryError:
            report.skipped.append(f"{f.stage_id}: no longer in the registry")
            continue
        with mechanisms.stage_lock(f.stage_id) as free:
            if not free or f.stage_id in running:
                report.skipped.append(f"{f.stage_id}: a reconfiguration is working on it")
                continue
            report.recoveries.append(recover(f, apps[f.stage_id], reg, max_restarts=max_restarts, wait_s=wait_s,
                                             progress=progress))
    return report


def failed_stages() -> list[tuple[str, str]]:
    with db.engine().connect() as conn:
        return [(r.stage_id, r.health_reason or "") for r in conn.execute(text(
            "SELECT stage_id, health_reason FROM stages WHERE health = 'failed' ORDER BY stage_id"))]


def clear_health(stage_ids: list[str]) -> None:
    """A redeploy puts a given-up stage back under the watchdog's care."""
    with db.engine().begin() as conn:
        conn.execute(text("UPDATE stages SET health = 'ok', health_reason = NULL WHERE stage_id = ANY(:s)"),
                     {"s": stage_ids})

