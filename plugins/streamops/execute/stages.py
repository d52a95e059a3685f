"""Start and stop stage runs: registry sync, admission, the `deployments` ledger, graceful stop."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamops import checkpoint_repair, processes, registry
from streamops.analyze.stats import useful_cores
from streamops.execute import start_inputs
from streamops.execute.launcher import launcher_for
from streamops.jobs import CodeBundle, package_code
from streamops.paths import data_dir
from streamops.plan.change import Current
from streamops.plan.mechanism import key_groups
from streamops.registry import Registry, stage_id
from streamops.run_spec import RunSpec
from streamops.store import db, ledger
from streamops.waiting import wait_until

log = logging.getLogger("streamops.execute")

Progress = Callable[[str], None]


class AdmissionRefused(RuntimeError):
    """The pool has too few free cores; the refusal is recorded in `deployments`."""


class StageNotRunning(RuntimeError):
    pass


@dataclass(frozen=True)
class StartResult:
    stage_id: str
    deployment_id: int
    pid: int | None
    already_running: bool
    log_path: str | None
    repaired: str | None = None  # what a torn checkpoint had moved aside before the start


@dataclass(frozen=True)
class StopResult:
    stage_id: str
    deployment_id: int
    outcome: str  # graceful | sigterm | sigkill | already-dead
    seconds: float


def checkpoint_for(sid: str) -> str:
    return str(data_dir() / "checkpoints" / sid)


def sync_registry(reg: Registry, apps: list[str] | None = None, *, replicas_override: int | None = None,
                  set_override: bool = False) -> list[str]:
    """Upsert pools, the given apps (default: all) and their stages. Returns the stage ids synced.
    A deploy sets (or with None clears) `replicas_override`, its replica count for every stage;
    every other sync keeps the one in place."""
    names = apps or list(reg.apps)
    unknown = [a for a in names if a not in reg.apps]
    if unknown:
        raise registry.RegistryError(f"no app {unknown[0]!r} in the registry; known apps: {', '.join(reg.apps)}")
    pools = [{"name": name, "master": pool.master, "cores": pool.cores,
              "network_delay_ms": json.dumps(pool.network_delay_ms)}
             for name, pool in reg.pools.items()]
    apps_rows = [{"name": a, "r_max_ms": reg.apps[a].r_max_ms,
                  "maintenance_window": reg.apps[a].maintenance_window.model_dump_json(),
                  "spec": reg.apps[a].model_dump_json(exclude={"stages"})} for a in names]
    stage_rows: list[dict[str, Any]] = [
        {"stage_id": stage_id(a, s), "app": a, "name": s, "job": st.job, "pool": st.pool,
         "cores": st.cores.initial, "min_cores": st.cores.min, "max_cores": st.cores.max,
         "state_partitions": st.state_partitions, "trigger_ms": st.trigger_interval_ms,
         "spec": st.model_dump_json(), "replicas": st.replicas,
         "managed": bool(st.redundancy and st.redundancy.enabled),
         "max_replicas": st.redundancy.max_replicas if st.redundancy else st.replicas,
         "override": replicas_override, "set_override": set_override}
        for a in names for s, st in reg.apps[a].stages.items()]
    ledger.sync_catalog(pools, apps_rows, stage_rows)
    ledger.sync_views(reg.views)
    return [r["stage_id"] for r in stage_rows]


def is_alive(dep) -> bool:
    """Whether a `deployments` row's driver still runs, asked of its pool's launcher. A run on
    another host cannot be judged by a pid here: it counts as alive, and its heartbeat decides
    (the supervisor's stale_heartbeat). A pid reused by another process since is not the driver."""
    host = getattr(dep, "host", None)
    if host and host != socket.gethostname():
        return True
    if not launcher_for(_master_of(dep)).is_alive(dep.pid, dep.driver_id):
        return False
    return processes.is_same_process(dep.pid, getattr(dep, "pid_started_at", None))


def _master_of(dep) -> str:
    """The pool master of a run: joined in by most queries; a bare `deployments` row has it in its
    config (a row written by hand, or by a release before the config had a pool: local)."""
    return getattr(dep, "master", None) or ((dep.config or {}).get("pool") or {}).get("master") or "local"


def current_config(sid: str, role: str = "primary") -> tuple[int | None, str | None, str | None]:
    """Cores, pool and checkpoint of the stage's latest run in `role`: a restart keeps what
    reconfigurations changed (a pre-staged or active-backup switch moves the checkpoint)."""
    row = ledger.latest_run(sid, role=role)
    return (row.cores, row.pool, row.checkpoint) if row else (None, None, None)


def current(sid: str) -> Current:
    """The stage's configuration now (its latest run), for `plan.change.validate_change`."""
    from streamops.execute import checkpoint

    row = ledger.latest_run(sid)
    if row is None:
        return Current()
    ops = tuple(o["operator"] for o in row.state_operators) if row.state_operators is not None else None
    return Current(row.cores, row.pool, checkpoint.state_partitions(row.checkpoint) if row.checkpoint else None, ops,
                   _useful_cores(row))


def _useful_cores(row) -> int | None:
    """A Kafka run's bound on useful cores: its topic's partitions as its driver last saw them."""
    source = (row.config or {}).get("spec", {}).get("source", {})
    if source.get("kind") != "kafka":
        return None
    beat = ledger.beat_source(row.id)
    return useful_cores(beat.source_partitions if beat else None, source.get("min_partitions"))


def restart_cores(last: int | None, st) -> int:
    """The cores a start that names none gets: the stage's last run's (a restart must not undo a
    scale-out), within the registry's bounds now; `cores.initial` for a first start."""
    if last is None:
        return st.cores.initial
    return min(max(last, st.cores.min), st.cores.max)


@dataclass(frozen=True)
class _Placement:
    """Where and at what size a start runs: the request's settings, else the latest run's, else
    the registry's."""

    app: str
    name: str
    sid: str
    st: Any  # the registry's stage
    pool_name: str
    pool_spec: Any
    ckpt: str
    cores: int
    partitions: int
    sized: Any  # plan.start_size's choice, or None
    repaired: str | None
    launcher: Any


def _place(ref: str, reg: Registry, cores: int | None, state_partitions: int | None, pool: str | None,
           checkpoint_path: str | None, role: str, sized_for_input: bool, progress: Progress) -> _Placement:
    """The start's placement, the app's registry synced first; unless the stage runs already, its
    torn checkpoint is repaired and (`sized_for_input`, no cores asked) its size chosen."""
    from streamops.execute import checkpoint

    app, name, st = reg.stage(ref)
    sid = stage_id(app, name)
    sync_registry(reg, [app])
    # A replica restarts as itself (its own checkpoint and pool); an active backup is always told.
    last_cores, last_pool, last_ckpt = current_config(sid, role if role.startswith("replica-") else "primary")
    pool_name = pool or last_pool or st.pool
    if pool_name not in reg.pools:
        raise registry.RegistryError(f"no pool {pool_name!r}; known pools: {', '.join(reg.pools)}")
    ckpt = checkpoint_path or last_ckpt or checkpoint_for(sid)
    pool_spec = reg.pools[pool_name]
    # A new stage on a cluster starts with key groups for live scaling up to its max cores: whether
    # its query keeps state is known only once it ran, and a stateless query ignores them.
    first_partitions = key_groups(st.state_partitions, st.cores.max, True) if pool_spec.kind == "standalone" \
        else st.state_partitions
    running = _runs(sid, role)  # being launched by another caller, or running: the start changes nothing
    repaired = None if running else _repair_checkpoint(sid, ckpt, progress)
    sized = _size_for_input(sid, st, pool_name, pool_spec, ckpt, role, progress) \
        if cores is None and sized_for_input and not running else None
    cores = cores or (sized.cores if sized else restart_cores(last_cores, st))
    partitions = state_partitions or checkpoint.state_partitions(Path(ckpt)) or first_partitions
    return _Placement(app, name, sid, st, pool_name, pool_spec, ckpt, cores, partitions, sized, repaired,
                      launcher_for(pool_spec.master))


def _run_spec(p: _Placement, *, reconfiguration_id: int | None, fault: str | None, warm_up: bool,
              as_run) -> RunSpec:
    """The run's contract with its driver: the stage's spec and code (`as_run`'s, for a rollback),
    refused when the checkpoint holds another source."""
    from streamops.execute import checkpoint

    st, sid, ckpt = p.st, p.sid, p.ckpt
    code = package_code(st.code)  # once per run: the hash says which code the run ran
    if as_run is not None:
        old = RunSpec.of(as_run.config)
        st, code = old.spec, CodeBundle(old.code_archive, old.code_sha256)
    if (changed := checkpoint.source_change(Path(ckpt), st.source.kind, getattr(st.source, "topic", None))) is not None:
        raise registry.RegistryError(f"stage {sid}: {changed}. Deploy the new source as a new stage (its own "
                                     f"checkpoint), or move {ckpt} aside to start it from its starting offsets")
    return RunSpec(app=p.app, stage=p.name, spec=st, pool=p.pool_spec, reconfiguration_id=reconfiguration_id,
                   fault=fault, speculation=_speculation(sid, st, p.pool_spec), warm_up=warm_up,
                   operator_manager=True, code_archive=code.archive, code_sha256=code.sha256,
                   checkpoint_repair=p.repaired, start_size=p.sized.reason if p.sized else None)


def _launch(p: _Placement, dep_id: int, spare):
    """The admitted run's driver: the warm `spare` when its cores and launcher match, else a new
    process. A launch that fails is recorded (the run `failed`) and raised as LaunchFailed."""
    env = {"STREAMOPS_DATABASE_URL": db.database_url()}
    try:
        if spare is not None and spare.ready and spare.cores == p.cores and launcher_for(spare.master) is p.launcher:
            launched = p.launcher.adopt(spare, dep_id)
            log.info("stage %s: deployment %d handed to the warm spare pid %s", p.sid, dep_id, launched.pid)
            return launched
        return p.launcher.launch(dep_id, p.sid, env, spark_ui=p.pool_spec.spark_ui)
    except Exception as e:
        # The run would otherwise stay `starting` with no pid, its cores reserved, unseen: record it
        # failed, with why; the supervisor and the watchdog retry it as a `launch_failed` failure.
        why = f"{LAUNCH_FAILED}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        ledger.finish(dep_id, "failed", why, 1)
        log.error("stage %s: action=launch failed deployment=%d: %s", p.sid, dep_id, why)
        raise LaunchFailed(f"stage {p.sid}: {why} (deployment {dep_id})") from e


def start_stage(
    ref: str,
    reg: Registry | None = None,
    *,
    cores: int | None = None,
    state_partitions: int | None = None,
    pool: str | None = None,
    checkpoint_path: str | None = None,
    role: str = "primary",
    wait_s: float = 120.0,
    progress: Progress = lambda _: None,
    reconfiguration_id: int | None = None,
    fault: str | None = None,
    spare=None,
    warm_up: bool = True,
    as_run=None,
    size_for_input: bool = True,
) -> StartResult:
    """Start a run of the stage. Unset cores/pool/checkpoint keep the latest run's; unset
    partitions keep the checkpoint's (the driver repartitions the state offline when they
    differ). A `secondary` run (active backup) runs beside the primary. `spare` (a warm driver,
    launcher.Spare) runs it instead of a new process when its cores and launcher match.
    `warm_up`: the driver runs the stage's query once over a sample before the real one, so its
    first batch is not cold; a restart whose output gap is measured (a recovery, a pause-resume)
    skips it, since the warm-up takes longer than the cold first batch it saves. `as_run` (a
    `deployments` row): run that run's job spec and code, not the registry's (a rollback of an
    upgrade restores the old code). A start that names no cores is sized for its input
    (`size_for_input`, plan.start_size: its backlog, rate and last size, `cores.initial` the floor);
    without it (a restart after a failure) it gets the cores the stage last ran at."""
    p = _place(ref, reg or registry.load(), cores, state_partitions, pool, checkpoint_path, role,
               size_for_input and reconfiguration_id is None, progress)
    spec = _run_spec(p, reconfiguration_id=reconfiguration_id, fault=fault, warm_up=warm_up, as_run=as_run)
    adm = ledger.admit(p.sid, role, p.pool_name, p.pool_spec.cores, p.cores, is_alive, state_partitions=p.partitions,
                       checkpoint=p.ckpt, launcher=p.launcher.kind, config=spec.model_dump(mode="json"))
    if adm.live is not None:
        return StartResult(p.sid, adm.live.id, adm.live.pid, True, adm.live.log_path)
    dep_id = adm.deployment_id
    if adm.refused:
        log.warning("stage %s: start refused: %s", p.sid, adm.refused)
        raise AdmissionRefused(f"start of {p.sid} refused: {adm.refused} (recorded as deployment {dep_id})")
    launched = _launch(p, dep_id, spare)
    ledger.mark_launched(dep_id, launched.pid, launched.driver_id, launched.log_path, socket.gethostname(),
                         processes.started_at(launched.pid), launched.ui_url)
    log.info("stage %s: launched deployment %d (pid %s, %d cores, %d partitions, pool %s)",
             p.sid, dep_id, launched.pid, p.cores, p.partitions, p.pool_name)
    progress(f"{p.sid}: driver pid {launched.pid} starting (log {launched.log_path})")
    if wait_s > 0:
        _wait_running(p.sid, dep_id, launched.pid, p.launcher, wait_s, progress)
    return StartResult(p.sid, dep_id, launched.pid, False, launched.log_path, p.repaired)


def _size_for_input(sid: str, st, pool_name: str, pool_spec, ckpt: str, role: str, progress: Progress):
    """plan.start_size's choice for a new deployment, logged and said; None when it could not be
    made (the start then takes the cores the stage last ran at, as a restart does)."""
    try:
        sized = start_inputs.choose(sid, st, pool_name, pool_spec, ckpt, role)
    except Exception:  # noqa: BLE001 - sizing is an improvement, never a reason not to start
        log.exception("stage %s: action=start-size failed; starting at the cores it last ran at", sid)
        return None
    log.info("stage %s: action=start-size %s", sid, sized.reason)
    progress(f"{sid}: {sized.reason}")
    return sized


def _runs(sid: str, role: str) -> bool:
    """Whether a run of the stage's `role` is being launched or runs: a start then changes nothing."""
    live = ledger.latest_run(sid, live=True, role=role)
    return live is not None and (live.status == "starting" and live.pid is None or is_alive(live))


def _repair_checkpoint(sid: str, ckpt: str, progress: Progress) -> str | None:
    """A torn checkpoint's newest entries moved aside (checkpoint_repair); the caller knows no live
    run of the stage's role uses it: what was moved, for the run's record, or None. Raises
    CheckpointTorn (the file and the fix) when a repair must not touch it."""
    moved = checkpoint_repair.repair_stage(Path(ckpt))
    if not moved:
        return None
    what = checkpoint_repair.describe(moved)
    log.warning("stage %s: action=checkpoint-repair moved aside %s", sid, what)
    progress(f"{sid}: checkpoint repaired: moved aside {what}")
    return what


LAUNCH_FAILED = "launch failed"


class LaunchFailed(RuntimeError):
    """The driver could not be launched; its run is recorded `failed` with the reason."""


# What an upgrade replaces: the job and everything that shapes its query and its output.
UPGRADE_FIELDS = ("job", "output_mode", "params", "source", "sink")


def code_change(sid: str, reg: Registry) -> str | None:
    """What differs between the stage's running primary and the registry now, in the job's code or
    spec (an `upgrade`), or None: the same code and spec."""
    live = ledger.latest_run(sid, live=True)
    if live is None:
        return None
    running = RunSpec.of(live.config)
    st = reg.stage(sid)[2]
    diffs = [f for f in UPGRADE_FIELDS
             if running.spec.model_dump(mode="json").get(f) != st.model_dump(mode="json").get(f)]
    sha = package_code(st.code).sha256
    if sha != running.code_sha256:
        diffs.append(f"code sha256 {(running.code_sha256 or 'none')[:12]} → {(sha or 'none')[:12]}")
    return ", ".join(diffs) or None


def _speculation(sid: str, st, pool) -> dict[str, str] | None:
    """Spark speculation at the redundancy manager's r, for an HA stage on a cluster pool (local
    mode ignores speculation): read by the driver when it starts."""
    if not (st.redundancy and st.redundancy.enabled and pool.kind == "standalone"):
        return None
    from streamops.plan.redundancy import speculation_conf

    return speculation_conf(db.value("redundancy_r", stage_id=sid) or 0.0)


def _wait_running(sid: str, dep_id: int, pid: int | None, launcher, wait_s: float, progress: Progress) -> None:
    def settled():
        dep = ledger.deployment(dep_id)
        return dep if dep.status in ("running", "failed", "stopped") or not launcher.is_alive(pid, dep.driver_id) \
            else None

    dep = wait_until(settled, wait_s)
    if dep is None:
        raise TimeoutError(f"stage {sid}: driver not running after {wait_s:.0f}s; it keeps starting in the background")
    if dep.status != "running":
        raise RuntimeError(f"stage {sid}: driver exited during start-up ({dep.stop_reason or 'no reason recorded'}); "
                           f"see {dep.log_path}")
    progress(f"{sid}: running (deployment {dep_id})")


def stop_stage(
    ref: str,
    reg: Registry | None = None,
    *,
    deadline_s: float = 60.0,
    kill_after_s: float = 15.0,
    requested_by: str = "cli",
    role: str = "primary",
    progress: Progress = lambda _: None,
) -> StopResult:
    """Ask the driver to stop at a batch boundary; SIGTERM after `deadline_s`, SIGKILL after `kill_after_s` more."""
    reg = reg or registry.load()
    app, name, _ = reg.stage(ref)
    sid = stage_id(app, name)
    started = time.monotonic()
    dep, alive = ledger.request_stop(sid, role, is_alive, requested_by, deadline_s)
    if dep is None:
        raise StageNotRunning(f"stage {sid} is not running" + ("" if role == "primary" else f" as {role}"))
    if not alive:
        return StopResult(sid, dep.id, "already-dead", 0.0)
    launcher = launcher_for(dep.master)
    progress(f"{sid}: stop requested (deployment {dep.id}, pid {dep.pid}); waiting for a batch boundary")

    outcome = "graceful"
    if not _wait_exit(launcher, dep.pid, deadline_s):
        outcome = "sigterm"
        progress(f"{sid}: no stop within {deadline_s:.0f}s, sending SIGTERM")
        launcher.terminate(dep.pid)
        if not _wait_exit(launcher, dep.pid, kill_after_s):
            outcome = "sigkill"
            progress(f"{sid}: still alive, sending SIGKILL")
            launcher.terminate(dep.pid, force=True)
            _wait_exit(launcher, dep.pid, 10)
    # The driver records its own clean stop; this only fills in when it could not.
    ledger.finish(dep.id, "stopped", f"stop by {requested_by}: {outcome}")
    seconds = time.monotonic() - started
    log.info("stage %s: deployment %d stopped (%s) in %.1fs", sid, dep.id, outcome, seconds)
    progress(f"{sid}: stopped ({outcome}) in {seconds:.1f}s")
    return StopResult(sid, dep.id, outcome, seconds)


def not_ours_to_kill(dep) -> str | None:
    """Why a run's recorded driver must not be signalled from here, or None. On another host its
    pid names nothing here: fencing ends it (its successor's admission makes the database refuse
    its next heartbeat, and it exits with its JVM). A pid whose process started at another time
    was reused by another process."""
    host = getattr(dep, "host", None)
    if host and host != socket.gethostname():
        return f"its driver runs on {host}: fenced by its successor, not killed from here"
    if not processes.is_same_process(dep.pid, getattr(dep, "pid_started_at", None)):
        return f"pid {dep.pid} is no longer its driver (gone, or reused by another process)"
    return None


def reap(dep, grace_s: float = 30.0) -> str:
    """A finished run's driver that may still be shutting down (its stopper died while it
    waited): given `grace_s` to exit, then SIGKILLed with its JVM. "exited" or "sigkill"; on
    another host "fenced": it cannot be reached from here, and its run is no longer current."""
    if dep.host and dep.host != socket.gethostname():
        return "fenced"
    launcher = launcher_for(_master_of(dep))
    if not launcher.is_alive(dep.pid, dep.driver_id) or not processes.is_same_process(dep.pid, dep.pid_started_at):
        return "exited"
    if _wait_exit(launcher, dep.pid, grace_s):
        return "exited"
    log.warning("stage %s: action=reap deployment %d (%s) still runs %.0fs on: SIGKILL", dep.stage_id, dep.id,
                dep.status, grace_s)
    launcher.terminate(dep.pid, force=True)
    _wait_exit(launcher, dep.pid, 10)
    return "sigkill"


def _wait_exit(launcher, pid: int | None, timeout_s: float) -> bool:
    return bool(wait_until(lambda: not launcher.is_alive(pid, None), timeout_s, interval_s=0.25))
