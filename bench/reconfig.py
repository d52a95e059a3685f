"""Reconfiguration cost of a live stateful stage, per mechanism and state size.

For each state size K (distinct keys of a `keycount` stage, one key per input record):
pre-generate K records, start the stage (1 core, 2 state partitions, 1 s trigger, 2-core pool),
wait until all K keys are in the sink, keep a small realtime feed running so output commits go
on, then reconfigure it `--runs` times per mechanism, alternating scale-out (2 cores, 4
partitions) and scale-in (1 core, 2 partitions) so every run repartitions the state offline.

From each `reconfigurations` row:
    stop_s        = stopped_at - stop_requested_at
    repartition_s = repartition_ms / 1000 (0 when null)
    restart_s     = first_batch_done_at - stopped_at  (checkpoint copy, driver + JVM start, repartition, first batch)
    output_gap_s  = downtime_ms / 1000                (longest gap between output commits)
and a breakdown of restart_s from the new run's `deployments` row. Medians per
(mechanism, action, state size) go to bench/results/reconfig.json (reconfig_quick.json with
--quick), raw per-run values under `samples`.

Mechanisms are whatever `mechanisms.MECHANISMS` holds (or `--mechanisms`). Those that start
from a pre-staged copy (prestaged, active_backup) get it staged right before the request, as the
control loop would at the alarming level, timed as `prestage_s`. active_backup overlaps old and
new runs (1 + 2 cores), so it gets a 3-core pool budget (`--overlap-pool-cores`); a 2-core pool
refuses it. Every live row is a new key, so the feed is kept small (10 rows/s); the keys actually
in state at each run are recorded. Driver logs of runs that failed or whose old run was stopped
mid-batch are kept under bench/results/reconfig_logs/.

Runs in a scratch database (`streamops_bench_reconfig`) and a temporary STREAMOPS_HOME, so the
demo's data is never touched; both are removed at the end.

    .venv/bin/python bench/reconfig.py [--keys 10000 100000 1000000] [--runs 5] [--mechanisms ...] [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shutil
import signal
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.harness import RESULTS, load_1m, machine_notes, scratch_run, shown, write_result  # noqa: E402
from demo.stages import demo_job
from streamops import generator, quality, registry  # noqa: E402
from streamops.execute import mechanisms, reconfigure, stages, staging  # noqa: E402
from streamops.paths import REPO_ROOT  # noqa: E402
from streamops.store import db  # noqa: E402

SCRATCH_DB = "streamops_bench_reconfig"
APP = "bench"
TRIGGER_MS = 1000
POOL_CORES = 2
SMALL = {"cores": 1, "partitions": 2}
LARGE = {"cores": 2, "partitions": 4}
# Targets from the issue (output gap): active backup ≤ 2 × trigger; pause–resume ≤ 10 s at 1M keys.
TARGETS = {"active_backup": (2 * TRIGGER_MS / 1000, 0), "pause_resume": (10.0, 1_000_000),
           "in_driver": (5.0, 1_000_000)}  # issue 13: in-driver pause–resume ≤ 5 s at 1M keys
# Mechanisms that change a running driver in place: only on a standalone pool (--cluster).
IN_PLACE = {"live", "in_driver"}
# Mechanisms that start from a pre-staged copy: the control loop stages it ahead of time (at the
# alarming level), so the bench stages it before the request and times that separately.
PRESTAGED = {"prestaged", "active_backup"}
# Mechanisms whose old and new runs overlap: the pool must hold both during the overlap.
OVERLAPPING = {"active_backup"}

console = Console(width=None if sys.stdout.isatty() else 150)
T0 = time.monotonic()


def say(msg: str) -> None:
    console.print(f"[dim]{time.monotonic() - T0:7.1f}s[/dim] {msg}", highlight=False)


# --------------------------------------------------------------------------- environment

# --------------------------------------------------------------------------- the stage

def make_registry(stage: str, input_path: str, files_per_trigger: int, pool_cores: int = POOL_CORES,
                  cluster: bool = False) -> registry.Registry:
    spec = {
        **demo_job("keycount", {"kind": "files", "path": input_path, "max_files_per_trigger": files_per_trigger}),
        "cores": {"initial": SMALL["cores"], "min": 1, "max": LARGE["cores"]},
        "state_partitions": SMALL["partitions"], "trigger_interval_ms": TRIGGER_MS, "pool": "bench",
        "policy": {"kind": "edf"},
    }
    return registry.parse({
        # --cluster: the embedded standalone cluster, where `live` applies and drivers are client-mode.
        "pools": {"bench": {"cores": pool_cores,
                            **({"master": "embedded", "executor_memory": "1g"} if cluster else {})}},
        "apps": {APP: {"r_max_ms": 10_000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                       "stages": {stage: spec}}},
    })


class Feeder:
    """The realtime generator in the background (a run of its own, so its ids never collide)."""

    def __init__(self, out: Path, rate: float, seed: int):
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="feeder",
                                       args=(out, rate, seed))

    def _run(self, out: Path, rate: float, seed: int) -> None:
        try:
            generator.generate(out, "web", f"constant:rate={rate}", seed=seed, duration_s=6 * 3600,
                               realtime=True, run="live", stop_event=self.stop)
        except BaseException as e:  # noqa: BLE001 - reported by the bench
            self.error = e

    def start(self) -> Feeder:
        self.thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        self.thread.join(15)


def q1(name: str, **params):
    """The first row of the benchmark's query sql/bench/<name>.sql."""
    return db.row(f"bench/{name}", **params)


def scalar(name: str, **params):
    return db.value(f"bench/{name}", **params)


def latest_run(sid: str):
    return q1("latest_primary_run", s=sid)


def live_run(sid: str):
    return q1("live_primary_run", s=sid)


def _ancestors_include(proc, pid: int) -> bool:
    try:
        return any(p.pid == pid for p in proc.parents())
    except Exception:  # noqa: BLE001 - gone meanwhile
        return True


def foreign_jvms() -> int:
    """Java processes on this machine that this bench did not start (other people's Spark)."""
    import psutil

    me = os.getpid()
    n = 0
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] == "java" and not _ancestors_include(proc, me):
            n += 1
    return n


def machine_load() -> dict:
    return {"loadavg_1m": load_1m(), "foreign_jvms": foreign_jvms()}


def wait_quiet(max_s: float) -> float:
    """Wait (at most max_s) until no one else's JVM runs: other Spark jobs on 2 cores distort every number."""
    started = time.monotonic()
    if max_s <= 0 or foreign_jvms() == 0:
        return 0.0
    with console.status("other Spark processes are running on this machine; waiting for quiet …"):
        while time.monotonic() - started < max_s and foreign_jvms() > 0:
            time.sleep(2)
    waited = time.monotonic() - started
    say(f"[yellow]waited {waited:.0f}s for other JVMs ({foreign_jvms()} still running)[/yellow]")
    return waited


def _all(name: str, **params) -> list:
    return db.rows(f"bench/{name}", **params)


def sink_keys(sid: str) -> int:
    return scalar("sink_keys", s=sid)


def commits_of(dep_id: int) -> int:
    return scalar("commits_of_run", d=dep_id)


def wait_for(cond, timeout_s: float, what: str, interval: float = 1.0, status: str | None = None):
    deadline = time.monotonic() + timeout_s
    with console.status(status or f"waiting for {what} …") as st:
        while time.monotonic() < deadline:
            value = cond()
            if value:
                return value
            if status:
                st.update(f"{status} ({deadline - time.monotonic():.0f}s left)")
            time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def prefill(out: Path, keys: int, rows_per_file: int) -> tuple[int, int, float]:
    """K records in ceil(K / rows_per_file) tick files, written as fast as possible."""
    files = max(1, math.ceil(keys / rows_per_file))
    rate = keys / files
    started = time.monotonic()
    s = generator.generate(out, "web", f"constant:rate={rate!r}", seed=7, duration_s=files, realtime=False, run="pre")
    if s.valid != keys:  # the trace's carry makes it exact; make sure
        raise RuntimeError(f"prefill wrote {s.valid} valid rows, expected {keys}")
    return s.files, s.valid, time.monotonic() - started


# --------------------------------------------------------------------------- one reconfiguration

def _sec(a, b) -> float | None:
    return None if a is None or b is None else round((a - b).total_seconds(), 3)


PHASES = ("stop_requested_at", "stopped_at", "state_ready_at", "restarted_at", "first_batch_done_at", "caught_up_at",
          "finished_at")


def measure(rid: int, outcome: reconfigure.Outcome) -> dict:
    r = q1("reconfiguration", i=rid)
    # The row links its runs only once the new one is up; a failed start is found by its config.
    new = q1("deployment", i=r.new_deployment_id) if r.new_deployment_id else \
        q1("deployment_of_reconfiguration", s=r.stage_id, r=str(rid))
    # An in-place change (live, in_driver) keeps the run: its first commit is the first after the
    # queries restarted (or the executors changed), not the run's first.
    in_place = r.mechanism in IN_PLACE
    since = (r.restarted_at or r.executors_ready_at or r.requested_at) if in_place else r.requested_at
    first_commit = scalar("first_commit_since", d=new.id, t=since) if new else None
    old = q1("deployment", i=r.old_deployment_id) if r.old_deployment_id else \
        q1("primary_run_before", s=r.stage_id, t=r.requested_at)
    recent_ms = [x[0] for x in _all("recent_batch_ms", d=old.id, t=r.stop_requested_at or r.requested_at)] \
        if old else []
    rep = (r.repartition_ms or 0.0) / 1000
    launch = None if r.mechanism in IN_PLACE else _sec(r.state_ready_at, new.started_at if new else None)
    overlap = r.mechanism in OVERLAPPING  # the new run starts before the old one stops
    old_reason = old.stop_reason if old else None
    return {
        "reconfiguration_id": rid, "status": outcome.status, "detail": outcome.detail,
        "action": r.action, "mechanism": r.mechanism,
        "from_cores": r.from_cores, "target_cores": r.target_cores, "target_partitions": r.target_partitions,
        "stop_s": _sec(r.stopped_at, r.stop_requested_at),
        "repartition_s": round(rep, 3),
        "restart_s": _sec(r.first_batch_done_at, r.stopped_at),
        "output_gap_s": None if r.downtime_ms is None else round(r.downtime_ms / 1000, 3),
        # The stage's own rhythm: the longest gap between its commits in the minute before the request.
        "rhythm_gap_s": round(float(scalar("commit_rhythm", s=r.stage_id, t=r.requested_at) or 0), 3),
        "scale_s": _sec(r.executors_ready_at, r.scale_requested_at),
        # Where restart_s goes (pause_resume order: stopped → copy → launch → state_ready → restarted → first batch).
        # For an overlapping mechanism the new run's phases happen before the stop: its start-up is
        # hidden, and restart_s (first_batch_done is stamped after the switch) is ~0 by construction.
        "breakdown": {
            "rollback_copy_s": None if overlap or in_place or not new else _sec(new.started_at, r.stopped_at),
            "driver_start_s": None if launch is None else round(launch - rep, 3),  # python + JVM + SparkSession + agent
            "repartition_s": round(rep, 3),
            "query_start_s": _sec(r.restarted_at, r.state_ready_at),
            "first_batch_s": _sec(first_commit, r.restarted_at),
            "first_batch_stamp_lag_s": None if overlap else _sec(r.first_batch_done_at, first_commit),
            "catch_up_s": _sec(r.caught_up_at, r.first_batch_done_at),
            "new_run_launch_to_first_commit_s": _sec(first_commit, new.started_at) if new and not in_place else None,
            "overlap_s": _sec(r.stopped_at, first_commit) if overlap else None,
        },
        # Did the old run stop between batches? An interrupted batch (the driver's 30 s deadline)
        # leaves offsets/N without commits/N, which the offline repartition refuses.
        "old_run_stop_reason": old_reason,
        "old_run_stopped_at_boundary": None if old_reason is None else "at a batch boundary" in old_reason,
        # Batches at or above the trigger interval run back to back: the stop rarely finds a boundary.
        "old_run_recent_batch_ms_median": statistics.median(recent_ms) if recent_ms else None,
        "old_deployment_id": old.id if old else None,
        "phases_from_request_s": {p: _sec(getattr(r, p), r.requested_at) for p in PHASES},
        "new_run_started_from_request_s": _sec(new.started_at, r.requested_at) if new else None,
        "total_s": round(outcome.seconds, 3),
        "requested_to_finished_s": _sec(r.finished_at, r.requested_at),
        "new_deployment_id": new.id if new else None,
        "logs": [d.log_path for d in (old, new) if d is not None and d.log_path],
    }


def kill_an_executor(sid: str, reg: registry.Registry, run: int, which: str = "newest") -> dict:
    """kill -9 of one executor JVM of the live run (on the cluster). Its tasks re-run elsewhere
    and the master replaces it. The output gap is the longest gap between the stage's commits
    from its last commit before the kill to the third after its replacement started, against
    the stage's steady commit interval before it (`wait_steady`) and the longest gap in the
    minute before (the rhythm)."""
    import psutil

    dep = live_run(sid)
    if dep.cores < LARGE["cores"]:  # kill one of two executors: the other carries on (not measured)
        rid = reconfigure.request(sid, "scale_out", cores=LARGE["cores"], mechanism="live", reg=reg,
                                  requested_by="bench:reconfig")
        reconfigure.execute(rid, gate=quality.gate_new_run, reg=reg)
        settle(sid, 3, 180)
        dep = live_run(sid)

    def executor_pids() -> list[int]:
        """The run's live executor JVMs, oldest executor id first."""
        found = []
        for p in psutil.process_iter(["cmdline", "status"]):
            argv = p.info["cmdline"] or []
            if "CoarseGrainedExecutorBackend" in " ".join(argv) and dep.driver_id in argv \
                    and p.info["status"] != psutil.STATUS_ZOMBIE:
                found.append((int(argv[argv.index("--executor-id") + 1]), p.pid))
        return [pid for _, pid in sorted(found)]

    # The previous kill's replacement must be up: a kill of the only executor measures another thing.
    wait_for(lambda: len(executor_pids()) >= dep.cores, 120, f"{dep.cores} executors of the run", interval=0.5)
    interval, steady = wait_steady(sid, after=time.time())
    pids = executor_pids()
    killed_at = datetime.now(UTC)
    rhythm = float(scalar("commit_rhythm", s=sid, t=killed_at) or 0)
    sample = {"mechanism": "executor_kill", "action": f"kill {which}", "run": run, "status": "failed",
              "cores": dep.cores, "executors": len(pids), "rhythm_gap_s": round(rhythm, 3), "interval_s": interval,
              "steady": steady, "breakdown": {}}
    if not pids:
        return {**sample, "detail": f"no executor of {dep.driver_id} found"}
    # the newest (the last replacement), or the oldest, which holds most warm state stores
    os.kill(pids[-1] if which == "newest" else pids[0], signal.SIGKILL)
    # Up to 3 commits after the replacement executor is up: its cold first tasks are part of the cost.
    wait_for(lambda: len(executor_pids()) >= dep.cores, 120, "the replacement executor", interval=0.2)
    replaced_at = datetime.now(UTC)
    wait_for(lambda: scalar("commits_after", s=sid, t=replaced_at) >= 3, 180,
             "3 commits after the replacement executor started", interval=0.5)
    gap = scalar("gap_since_last_commit", s=sid, t=killed_at)
    after = live_run(sid)
    same = after is not None and after.id == dep.id
    return {**sample, "status": "done" if same else "failed", "output_gap_s": round(float(gap), 3),
            "detail": "the same run kept going" if same else "the run was replaced"}


def wait_steady(sid: str, after: float, window: int = 8, timeout_s: float = 120) -> tuple[float | None, bool]:
    """Wait until the stage's last `window` commit intervals since `after` (epoch s: every
    executor up) are even (the longest at most 1.5× the median): an executor kill is then
    measured against the stage's steady rhythm, with every executor warm, not against a
    catch-up or a cold replacement. Returns (median interval in s, steady)."""
    deadline, interval = time.monotonic() + timeout_s, None
    while True:
        times = [float(r.at_s) for r in _all("stage_commit_times", s=sid, b=datetime.now(UTC))
                 if float(r.at_s) > after][-window - 1:]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        if len(gaps) == window:
            interval = round(statistics.median(gaps), 3)
            if max(gaps) <= 1.5 * interval:
                return interval, True
        if time.monotonic() > deadline:
            return interval, False
        time.sleep(1)


def keep_logs(paths: list[str], rid: int, dst: Path) -> list[str]:
    """Copy the old and new drivers' logs of a troubled run to bench/results/reconfig_logs/<result name>/."""
    dst.mkdir(parents=True, exist_ok=True)
    kept = []
    for p in paths:
        if Path(p).exists():
            target = dst / f"r{rid}-{Path(p).name}"
            shutil.copyfile(p, target)
            kept.append(str(target.relative_to(REPO_ROOT)) if target.is_relative_to(REPO_ROOT) else str(target))
    return kept


def ensure_running(sid: str, reg: registry.Registry) -> None:
    """After a failed reconfiguration the stage may be down: bring its last configuration back."""
    if live_run(sid) is not None:
        return
    last = latest_run(sid)
    say(f"[yellow]{sid} is down; restarting its last configuration ({last.cores} cores)[/yellow]")
    stages.start_stage(sid, reg, cores=last.cores, state_partitions=last.state_partitions, wait_s=300)


def settle(sid: str, min_commits: int, timeout_s: float) -> None:
    """Wait until the live run has committed a few non-empty batches: the next run's output gap
    is then measured from a steady stream of commits."""
    def ok():
        dep = live_run(sid)
        return dep is not None and dep.status == "running" and commits_of(dep.id) >= min_commits
    wait_for(ok, timeout_s, f"{min_commits} committed batches of the live run", interval=0.5)


# --------------------------------------------------------------------------- one state size

def run_size(keys: int, args, mechs: list[str], home: Path, samples: list[dict], setup: dict,
             save=lambda: None) -> None:
    """Measure one state size; appends to `samples` and fills `setup` as it goes (kept on failure)."""
    stage = f"kc{keys}"
    sid = registry.stage_id(APP, stage)
    input_rel = f"{stage}/in"
    reg = make_registry(stage, input_rel, args.files_per_trigger, cluster=args.cluster)
    # The overlap of an active backup needs old + new cores (1 + 2): a 2-core pool refuses it.
    reg_overlap = make_registry(stage, input_rel, args.files_per_trigger, args.overlap_pool_cores, cluster=args.cluster)
    input_dir = registry.resolve_path(input_rel)
    setup["state_keys"] = keys
    feeder: Feeder | None = None
    try:
        with console.status(f"generating {keys:,} records …"):
            files, rows, gen_s = prefill(input_dir, keys, args.rows_per_file)
        setup.update(prefill_files=files, prefill_rows=rows, prefill_s=round(gen_s, 1))
        say(f"[bold]{keys:,} keys[/bold]: {rows:,} records in {files} files generated in {gen_s:.1f}s")

        t = time.monotonic()
        res = stages.start_stage(sid, reg, wait_s=300)
        say(f"{sid}: started deployment {res.deployment_id} (1 core, 2 partitions) in {time.monotonic() - t:.1f}s; "
            f"ingesting {keys:,} keys")

        def ingested():
            dep = latest_run(sid)
            if dep.status in ("failed", "stopped"):
                raise RuntimeError(f"{sid} {dep.status} during ingest: {dep.stop_reason} (log {dep.log_path})")
            return sink_keys(sid) >= keys
        ingest_timeout = args.ingest_timeout or 120 + keys / 1000
        wait_for(ingested, ingest_timeout, f"{keys:,} keys in the sink", interval=1.0,
                 status=f"ingesting {keys:,} keys")
        setup["ingest_s"] = round(time.monotonic() - t, 1)
        ckpt = Path(latest_run(sid).checkpoint)
        setup["checkpoint_mb"] = round(sum(f.stat().st_size for f in ckpt.rglob("*") if f.is_file()) / 2**20, 1)
        say(f"{sid}: all {keys:,} keys committed {setup['ingest_s']:.1f}s after the start "
            f"(checkpoint {setup['checkpoint_mb']} MB); starting the live feed at {args.live_rate} rows/s")

        feeder = Feeder(input_dir, args.live_rate, seed=keys).start()
        settle(sid, 3, 120)

        for mech in mechs:
            for i in range(args.runs):
                if feeder.error:
                    raise RuntimeError(f"the live generator died: {feeder.error!r}")
                waited = wait_quiet(args.wait_quiet_s)
                cur = latest_run(sid)
                action, target = ("scale_out", LARGE) if cur.cores == SMALL["cores"] else ("scale_in", SMALL)
                mreg = reg_overlap if mech in OVERLAPPING else reg
                keys_now = sink_keys(sid)
                load_before = machine_load()
                say(f"[cyan]{mech}[/cyan] run {i + 1}/{args.runs}: {action} → {target['cores']} cores, "
                    f"{target['partitions']} partitions ({keys_now:,} keys in state; load {load_before})")
                prestage_s, prestage_error = None, None
                if mech in PRESTAGED and hasattr(mechanisms, "prestage"):
                    t = time.monotonic()
                    try:
                        staging.prestage(sid, target["partitions"], mreg, progress=lambda m: say(f"  [dim]{m}[/dim]"))
                        prestage_s = round(time.monotonic() - t, 3)
                    except Exception as e:  # noqa: BLE001 - the executor stages again; record why
                        prestage_error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                        say(f"  [red]pre-staging failed after {time.monotonic() - t:.1f}s: {prestage_error}[/red]")
                # A live change keeps the state partitions (key groups); the others repartition.
                rid = reconfigure.request(sid, action, cores=target["cores"],
                                         partitions=None if mech == "live" else target["partitions"],
                                         mechanism=mech, reg=mreg, requested_by="bench:reconfig")
                deadlines = mechanisms.Deadlines(stop_s=60, first_batch_s=args.first_batch_s,
                                                 caught_up_s=args.caught_up_s)
                outcome = reconfigure.execute(rid, gate=quality.gate_new_run, reg=mreg, mechanism=mech,
                                             deadlines=deadlines, progress=lambda m: say(f"  [dim]{m}[/dim]"))
                s = measure(rid, outcome)
                s.update(state_keys=keys, state_keys_now=keys_now, run=i + 1, prestage_s=prestage_s,
                         prestage_error=prestage_error, waited_for_quiet_s=round(waited, 1),
                         pool_cores=mreg.pools["bench"].cores, load_before=load_before, load_after=machine_load())
                if outcome.status != "done" or s["old_run_stopped_at_boundary"] is False:
                    s["kept_logs"] = keep_logs(s["logs"], rid, args.logs_dir)
                samples.append(s)
                save()  # a killed bench keeps every run measured so far
                colour = "green" if outcome.status == "done" else "red"
                say(f"  [{colour}]{outcome.status}[/{colour}]: stop {s['stop_s']}s, repartition {s['repartition_s']}s, "
                    f"restart {s['restart_s']}s, output gap {s['output_gap_s']}s "
                    f"(driver start {s['breakdown']['driver_start_s']}s, "
                    f"first batch {s['breakdown']['first_batch_s']}s)"
                    + ("" if outcome.status == "done" else f" — {outcome.detail}"))
                ensure_running(sid, mreg)
                settle(sid, 3, 180)
        for i in range(args.executor_kills if args.cluster else 0):
            waited = wait_quiet(args.wait_quiet_s)
            say(f"[cyan]executor kill[/cyan] run {i + 1}/{args.executor_kills} ({sink_keys(sid):,} keys in state)")
            s = kill_an_executor(sid, reg, i + 1, args.kill_executor)
            s.update(state_keys=keys, state_keys_now=sink_keys(sid), waited_for_quiet_s=round(waited, 1),
                     load_after=machine_load())
            samples.append(s)
            save()
            say(f"  {s['status']}: output gap {s.get('output_gap_s')}s (steady commit interval {s['interval_s']}s"
                f"{'' if s['steady'] else ', not steady after 120 s'}; {s['detail']})")
            settle(sid, 3, 180)
    finally:
        if feeder is not None:
            feeder.close()
        if live_run(sid) is not None:
            try:
                stages.stop_stage(sid, reg, deadline_s=30, requested_by="bench:reconfig")
                say(f"{sid}: stopped")
            except Exception as e:  # noqa: BLE001 - keep cleaning up
                say(f"[red]{sid}: stop failed: {e}[/red]")
        if not args.keep:
            shutil.rmtree(home / "data" / stage, ignore_errors=True)
            for p in (home / "data" / "checkpoints").glob(f"{sid}*"):
                shutil.rmtree(p, ignore_errors=True)
            db.write("bench/sink_outputs_clear", s=sid)


# --------------------------------------------------------------------------- aggregation

ALL_ACTIONS = "all"  # the row of a mechanism and state size over both actions


def _median(values):
    vals = [v for v in values if v is not None]
    return round(statistics.median(vals), 3) if vals else None


def aggregate(samples: list[dict], setups: dict[int, dict], machine: dict, args) -> list[dict]:
    rows = []
    groups: dict[tuple, list[dict]] = {}
    for s in samples:
        groups.setdefault((s["mechanism"], s["action"], s["state_keys"]), []).append(s)
        # Every run of a mechanism and state size, both actions: the median of all (>= 5) runs.
        groups.setdefault((s["mechanism"], ALL_ACTIONS, s["state_keys"]), []).append(s)
    for (mech, action, keys), group in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])):
        done = [s for s in group if s["status"] == "done"]
        row = {
            "mechanism": mech, "action": action, "state_keys": keys,
            **{k: _median(s.get(k) for s in done)
               for k in ("stop_s", "repartition_s", "restart_s", "output_gap_s", "rhythm_gap_s", "scale_s")},
            "cluster": args.cluster,
            "prestage_s": _median(s.get("prestage_s") for s in done),
            "state_keys_actual": _median(s.get("state_keys_now") for s in group),
            "old_run_stops_interrupted": sum(1 for s in group if s.get("old_run_stopped_at_boundary") is False),
            "pool_cores": group[0].get("pool_cores"),
            "runs": len(done), "failed_runs": len(group) - len(done),
            "breakdown_median": {k: _median(s["breakdown"][k] for s in done) for k in group[0]["breakdown"]},
            "samples": group,
            "setup": setups.get(keys, {}),
            "machine": {**machine, "trigger_interval_ms": TRIGGER_MS, "pool_cores": POOL_CORES,
                        "live_rate_rows_per_s": args.live_rate, "max_files_per_trigger": args.files_per_trigger,
                        "prefill_rows_per_file": args.rows_per_file,
                        "runs_requested_per_mechanism": args.runs,
                        "deadlines": {"stop_s": 60, "first_batch_s": args.first_batch_s,
                                      "caught_up_s": args.caught_up_s},
                        "note": "each run is one reconfiguration; runs alternate scale_out (2 cores, 4 partitions) "
                                "and scale_in (1 core, 2 partitions), so per-action rows hold about half of the runs; "
                                "mechanisms in PRESTAGED get their copy staged (timed as prestage_s) right before the "
                                "request, as the control loop would at the alarming level; OVERLAPPING mechanisms "
                                f"(active_backup) run with a {args.overlap_pool_cores}-core pool budget so the overlap "
                                "is admitted (still 2 physical CPUs)"},
        }
        target = TARGETS.get(mech)
        if mech == "live" and row["output_gap_s"] is not None and row["rhythm_gap_s"] is not None:
            # The target: no larger than the stage's own rhythm in the minute before.
            row["target_output_gap_s"] = row["rhythm_gap_s"]
            row["meets_target"] = row["output_gap_s"] <= row["rhythm_gap_s"]
        elif mech == "executor_kill" and row["output_gap_s"] is not None:
            # The target: an executor kill costs at most two trigger intervals of output,
            # counted in the stage's own commit interval when its batches take longer than a trigger.
            row["interval_s"] = _median(s.get("interval_s") for s in done)
            row["target_output_gap_s"] = 2 * max(TRIGGER_MS / 1000, row["interval_s"] or 0)
            row["meets_target"] = row["output_gap_s"] <= row["target_output_gap_s"]
        elif target and keys >= target[1] and row["output_gap_s"] is not None:
            row["target_output_gap_s"] = target[0]
            row["meets_target"] = row["output_gap_s"] <= target[0]
        rows.append(row)
    return rows


def _f(v, unit="s") -> str:
    return "—" if v is None else f"{v:.2f}{unit}" if v < 10 else f"{v:.1f}{unit}"


def print_tables(rows: list[dict], wall_s: float) -> None:
    t = Table(title=f"reconfiguration cost (median per row; trigger {TRIGGER_MS} ms, {os.cpu_count()} cores)")
    for col in ("mechanism", "action", "state keys", "keys at run", "runs", "pre-stage", "stop", "repartition",
                "restart", "output gap", "target"):
        t.add_column(col, justify="left" if col in ("mechanism", "action", "target") else "right")
    for r in rows:
        tgt = "—"
        if "meets_target" in r:
            tgt = f"{'[green]met' if r['meets_target'] else '[red]missed'} (≤ {float(r['target_output_gap_s']):g}s)"
        runs = f"{r['runs']}" + (f" (+{r['failed_runs']} failed)" if r["failed_runs"] else "")
        t.add_row(r["mechanism"], r["action"], f"{r['state_keys']:,}", f"{r['state_keys_actual'] or 0:,.0f}", runs,
                  _f(r["prestage_s"]), _f(r["stop_s"]), _f(r["repartition_s"]),
                  _f(r["restart_s"]), _f(r["output_gap_s"]), tgt)
    console.print(t)
    b = Table(title="where restart time goes (median seconds; restart = stopped → first batch committed)")
    cols = ("rollback_copy_s", "driver_start_s", "repartition_s", "query_start_s", "first_batch_s", "catch_up_s",
            "new_run_launch_to_first_commit_s")
    for col in ("mechanism", "action", "state keys", "checkpoint copy", "driver+JVM start", "repartition",
                "query start", "first batch", "catch-up", "launch→1st commit", "stops cut mid-batch"):
        b.add_column(col, justify="left" if col in ("mechanism", "action") else "right")
    for r in rows:
        b.add_row(r["mechanism"], r["action"], f"{r['state_keys']:,}",
                  *(_f(r["breakdown_median"].get(c)) for c in cols),
                  f"{r['old_run_stops_interrupted']}/{len(r['samples'])}")
    console.print(b)
    console.print(f"wall time {wall_s / 60:.1f} min")


def first_batch_rows(runs: int, out: Path, machine: dict) -> list[dict]:
    """The first batch after a start (cold, warmed up) and after a live scale-out, against the
    steady batch: bench/first_batch.py, saved beside the main result and printed."""
    from bench import first_batch

    say(f"[bold]first batches[/bold]: {runs} cold and {runs} warmed-up starts, each then scaled out live")
    rows = first_batch.run(runs, say)
    for r in rows:
        r["machine"] = {**machine, "trigger_interval_ms": first_batch.TRIGGER_MS, "rate_rows_per_s": first_batch.RATE,
                        "measured_at": datetime.now(UTC).isoformat(timespec="seconds")}
    write_result(out, rows)
    t = Table(title="first batch / steady batch (median, min–max; target ≤ 2×)")
    for col in ("event", "warm-up", "runs", "ratio", "first batch", "steady batch", "start → running", "load 1m"):
        t.add_column(col, justify="left" if col in ("event", "warm-up") else "right")
    for r in rows:
        ratio, fb, st = r["ratio"], r["first_batch_ms"], r["steady_batch_ms"]
        run_s = r.get("start_to_running_s", {}).get("median")
        colour = "green" if r["meets_target"] else "red"
        t.add_row(r["event"], "yes" if r["warm_up"] else "no", str(ratio["runs"]),
                  "—" if ratio["median"] is None else
                  f"[{colour}]{ratio['median']:.2f}×[/{colour}] ({ratio['min']:.2f}–{ratio['max']:.2f})",
                  "—" if fb["median"] is None else f"{fb['median']:.0f} ms",
                  "—" if st["median"] is None else f"{st['median']:.0f} ms",
                  "—" if run_s is None else f"{run_s:.1f}s", str(r["loadavg_1m"]["median"]))
    console.print(t)
    return rows


# --------------------------------------------------------------------------- main

def _args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str], Path]:
    """(the arguments, the mechanisms to measure, the result file)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", type=int, nargs="+", default=[10_000, 100_000, 1_000_000],
                   help="state sizes (distinct keys)")
    p.add_argument("--runs", type=int, default=5,
                   help="reconfigurations per mechanism and state size (alternating out/in)")
    p.add_argument("--mechanisms", nargs="+", default=None,
                   help=f"mechanisms to measure (default: every restarting one of {', '.join(mechanisms.MECHANISMS)})")
    p.add_argument("--quick", action="store_true", help="smoke run: --keys 10000 --runs 2")
    p.add_argument("--live-rate", type=float, default=10,
                   help="rows/s of the realtime feed during reconfigurations (every row is a new key: keep it small)")
    p.add_argument("--rows-per-file", type=int, default=20_000, help="rows per pre-generated input file")
    p.add_argument("--files-per-trigger", type=int, default=10, help="max_files_per_trigger of the stage")
    p.add_argument("--first-batch-s", type=float, default=300, help="executor deadline for the new run's first batch")
    p.add_argument("--overlap-pool-cores", type=int, default=LARGE["cores"] + SMALL["cores"],
                   help="pool budget for mechanisms whose runs overlap (active_backup); 2 makes admission refuse them")
    p.add_argument("--wait-quiet-s", type=float, default=20,
                   help="before each run, wait up to this long while other people's JVMs run on the machine")
    p.add_argument("--caught-up-s", type=float, default=300,
                   help="executor deadline for catching up (active_backup: the secondary reaching the primary); "
                        "default in the code is 120 s, raised so that a slow catch-up is measured "
                        "rather than rolled back")
    p.add_argument("--ingest-timeout", type=float, default=None,
                   help="seconds to wait for the K keys (default 120 + K/1000)")
    p.add_argument("--out", type=Path, default=None, help="result file (default bench/results/reconfig[_quick].json)")
    p.add_argument("--merge", action="store_true",
                   help="keep the result file's rows for other sizes/mechanisms (a long run done in parts)")
    p.add_argument("--keep", action="store_true", help="keep the scratch database and STREAMOPS_HOME")
    p.add_argument("--executor-kills", type=int, default=5,
                   help="with --cluster: kill -9 an executor of the running stage this many times per size")
    p.add_argument("--kill-executor", choices=("newest", "oldest"), default="newest",
                   help="which executor the kills hit: the newest (the previous kill's replacement) or the "
                        "oldest (it holds most of the warm state stores)")
    p.add_argument("--cluster", action="store_true",
                   help="run the stage on the embedded Spark standalone cluster (started in the scratch home); "
                        "adds the `live` and `in_driver` mechanisms")
    p.add_argument("--first-batch-runs", type=int, default=3,
                   help="with --cluster: this many cold and as many warmed-up starts, each then scaled out live, "
                        "for the first batch against the steady one (bench/first_batch.py; 0: skip)")
    args = p.parse_args(argv)
    if args.quick:
        args.keys, args.runs = [10_000], 2
    # `live` and `in_driver` need a standalone pool (--cluster).
    mechs = args.mechanisms or [m for m in mechanisms.MECHANISMS if args.cluster or m not in IN_PLACE]
    unknown = [m for m in mechs if m not in mechanisms.MECHANISMS]
    if unknown:
        p.error(f"unknown mechanism(s) {unknown}; available: {', '.join(mechanisms.MECHANISMS)}")
    out = args.out or RESULTS / ("reconfig_quick.json" if args.quick else "reconfig.json")
    return args, mechs, out


def main(argv: list[str] | None = None) -> list[dict]:
    args, mechs, out = _args(argv)
    args.logs_dir = RESULTS / "reconfig_logs" / out.stem

    def terminated(signum, _frame):  # SIGTERM: unwind through the finally blocks (stop drivers, drop the db)
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, terminated)
    shutil.rmtree(args.logs_dir, ignore_errors=True)
    started = time.monotonic()
    samples: list[dict] = []
    setups: dict[int, dict] = {}
    errors: list[str] = []
    # --merge: keep the rows of sizes/mechanisms this invocation does not measure (a run split in parts).
    kept: list[dict] = []
    if args.merge and out.exists():
        kept = [r for r in json.loads(out.read_text())
                if r["state_keys"] not in args.keys or r["mechanism"] not in mechs]
    machine: dict = {}

    def save(final: bool = False) -> list[dict]:
        new = aggregate(samples, setups, {**machine, "errors": errors, "partial": not final}, args)
        write_result(out, kept + new)
        return kept + new

    from streamops import spark_cluster

    with scratch_run(SCRATCH_DB, "streamops-bench-reconfig-", teardown=spark_cluster.down if args.cluster else None,
                     keep=args.keep, say=say) as home:
        if args.cluster:
            spark_cluster.up(workers=1, cores_per_worker=args.overlap_pool_cores, memory_per_worker="6g", progress=say)
        machine.update(machine_notes(args.cluster))
        say(f"scratch database {SCRATCH_DB}, STREAMOPS_HOME {home}; mechanisms {mechs}; sizes {args.keys}; "
            f"{args.runs} runs each")
        if args.cluster and args.first_batch_runs:
            first_batch_rows(args.first_batch_runs, out.with_name(f"{out.stem}_first_batch.json"), machine)
        for keys in args.keys:
            try:
                run_size(keys, args, mechs, home, samples, setups.setdefault(keys, {}), save)
            except Exception as e:  # noqa: BLE001 - report and go on with the next size
                msg = f"{keys:,} keys: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                errors.append(msg)
                say(f"[red]{msg}[/red]")
            finally:
                save()  # whatever was measured is on disk after every size
    wall = time.monotonic() - started
    rows = save(final=True)
    for r in rows[len(kept):]:
        r["machine"]["wall_time_s"] = round(wall, 1)
        r["machine"]["measured_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    write_result(out, rows)
    print_tables(rows, wall)
    if errors:
        console.print("[red]errors:[/red] " + "; ".join(errors))
    console.print(f"results in {shown(out)}")
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
