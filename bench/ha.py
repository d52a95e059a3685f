"""High availability on real drivers: failover time, and what replicas and the redundancy manager
buy under injected faults (issue 14).

Part 1, MTTR: one wordcount run under the supervisor; `--kills` times, kill -9 of the driver's
process group, wait for the recovery, 5 s of calm. MTTR = the failure (the supervisor's last look
at a live driver) → the first commit of the restarted run; output gap = last commit before →
first commit after. Medians.

Part 2, three setups on the same seeded fault schedule (driver kills at `--kill-mtbf`, slow
batches of ~3 s at `--slow-mtbf`, sent by `execute.faults.run_schedule` to a random live
replica), each for `--seconds` of a realtime feed (`--rate`, 50 rows/s):
  (a) one run with fast failover, (b) two static replicas, (c) the redundancy manager
  (max 2 replicas, 20 s period, a re-plan every 10 s as the replan DAG would).
Per setup: MTTR and output gap per failure (medians), violated 1-second windows (a second whose
best replica's p95 response exceeds R_max = 5 s, or with no commit for longer than R_max),
core-hours and run-hours (all replicas), and whether the sink equals the ground truth of one
failure-free run once the feed stops.

`--cluster`: part 1 only, with the stage on a cluster pool of the embedded Spark cluster
(1-core executors), whose warm spare is a registered driver holding no executor (issue 28);
results in ha_cluster.json.

`--load N`: part 1 under N busy-looping processes at the data plane's niceness
(`STREAMOPS_DATA_PLANE_NICE`, default 0), standing for other stages' drivers and executors on a
saturated machine; run it with 0 and with, say, 5 to compare (results in ha_load<N>_nice<n>.json).

`--fault sigstop`: part 1 only, warm spares only; the driver's process group is SIGSTOPped
instead of killed (a hung driver: issue 31 item 6), and SIGCONTed once the stage has recovered,
when it must be gone (the supervisor killed it). Detection = the failure's time (the last poll that
saw the driver running) → the supervisor's `failures` row. Results in ha_sigstop.json
(ha_cluster_sigstop.json with `--cluster`).

Scratch database `streamops_bench_ha` and a temporary STREAMOPS_HOME; both removed at the end.

    .venv/bin/python bench/ha.py [--kills 10] [--seconds 180] [--kill-mtbf 60] [--slow-mtbf 30] [--rate 50]
        [--skip-mttr] [--quick] [--cluster] [--fault kill|sigstop]
"""

from __future__ import annotations

import argparse
import contextlib
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.harness import load_1m, machine_notes, scratch_run, table, write_result  # noqa: E402
from demo import oracles  # noqa: E402
from demo.stages import demo_job
from streamops import control, generator, processes, registry, spark_cluster  # noqa: E402
from streamops.execute import faults, replicas, stages, supervisor  # noqa: E402
from streamops.execute.launcher import terminate_all_drivers  # noqa: E402
from streamops.store import db, ledger  # noqa: E402
from streamops.waiting import wait_until  # noqa: E402

SCRATCH_DB = "streamops_bench_ha"
R_MAX_MS = 5000
SID = "bench.wc"
console = Console(width=170)


def say(msg: str) -> None:
    console.print(f"[dim]{datetime.now():%H:%M:%S}[/] {msg}")


def reg_for(path: str, replicas_: int = 1, managed: bool = False, cluster: bool = False) -> registry.Registry:
    stage = {**demo_job("wordcount", {"kind": "files", "path": path, "max_files_per_trigger": 4}),
             "cores": {"initial": 1, "max": 2}, "state_partitions": 2, "trigger_interval_ms": 1000, "pool": "p",
             "replicas": replicas_}
    if managed:
        stage["redundancy"] = {"max_replicas": 2, "period_s": 20}
    pool = {"cores": 2, **({"master": "embedded", "executor_cores": 1, "executor_memory": "1g"} if cluster else {})}
    return registry.parse({
        "pools": {"p": pool, "q": pool},
        "apps": {"bench": {"r_max_ms": R_MAX_MS, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                           "stages": {"wc": stage}}},
    })


def q(name: str, **params):
    """The rows of the benchmark's query sql/bench/<name>.sql."""
    return db.rows(f"bench/{name}", **params)


def wait(cond, timeout_s: float, what: str, interval: float = 0.5):
    got = wait_until(cond, timeout_s, interval)
    if not got:
        raise TimeoutError(f"no {what} after {timeout_s:.0f}s")
    return got


def reset() -> None:
    """A clean slate between setups: no runs, no rows, no checkpoints."""
    terminate_all_drivers()
    with db.transaction() as conn:
        conn.execute(db.query("bench/ha_reset"))
    for sub in ("checkpoints", "bench"):
        shutil.rmtree(registry.resolve_path(sub), ignore_errors=True)


RATE = 50  # rows/s: two replicas, a spare and a restarting JVM share 2 cores (--rate)


def feed(path: str, seconds: float, seed: int, stop: threading.Event) -> threading.Thread:
    t = threading.Thread(target=generator.generate, daemon=True, kwargs=dict(
        out_dir=registry.resolve_path(path), kind="web", trace=f"constant:rate={RATE}", seed=seed, duration_s=seconds,
        stop_event=stop))
    t.start()
    return t


@contextlib.contextmanager
def busy_loops(n: int):
    """`n` processes that burn a core each at the data plane's niceness: other stages' work."""
    spin = "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass"  # ends with the bench
    procs = [processes.spawn_detached([sys.executable, "-c", spin], log_path=Path(os.devnull),
                                      nice=processes.DATA_PLANE_NICE) for _ in range(n)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(5)


def mttr_part(kills: int, warm_spares: bool = True, cluster: bool = False, fault: str = "kill") -> dict:
    reset()
    reg = reg_for("bench/mttr", cluster=cluster)
    stop = threading.Event()
    feeder = feed("bench/mttr", kills * 60 + 120, 1, stop)
    stages.start_stage(SID, reg)
    sup, sup_stop, sup_thread = supervisor.start_in_thread(
        reg, supervisor.SupervisorOptions(wait_s=90, warm_spares=warm_spares))
    rows = []
    try:
        for i in range(kills):
            run = wait(lambda: ledger.latest_run(SID, live=True), 120, "live run")
            wait(lambda run=run: q("commits_of_run", d=run.id)[0][0] >= 3, 120, "three commits")
            warm = bool(wait(lambda: sup.spare_ready(SID), 120, "a warm spare")) if warm_spares else False
            os.killpg(run.pid, signal.SIGSTOP if fault == "sigstop" else signal.SIGKILL)
            kinds = ["dead_pid"] if fault == "kill" else None  # not an output gap the load caused first
            f = wait(lambda run=run, kinds=kinds: q("failures_of_run", d=run.id, kinds=kinds), 180, "recovery")[0]
            rows.append({"warm": warm, "kind": f.kind, "mttr_s": f.mttr_ms / 1000, "gap_s": f.downtime_ms / 1000,
                         "detect_s": (f.detected_at - f.failed_at).total_seconds(),
                         "load_avg_1min": load_1m()})
            if fault == "sigstop":  # the supervisor killed the stopped driver: nothing is left to wake
                rows[-1]["driver_left"] = processes.is_alive(run.pid)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(run.pid, signal.SIGCONT)
            say(f"{fault} {i + 1}/{kills} ({'warm spare' if warm else 'cold start'}): {f.kind}, "
                f"MTTR {rows[-1]['mttr_s']:.1f}s, output gap {rows[-1]['gap_s']:.1f}s, "
                f"detected after {rows[-1]['detect_s']:.1f}s, load {rows[-1]['load_avg_1min']:.1f}"
                + (" [the stopped driver was still there]" if rows[-1].get("driver_left") else ""))
            time.sleep(5)
    finally:
        sup_stop.set()
        sup_thread.join(60)
        stop.set()
        feeder.join(10)
        terminate_all_drivers()
    med = {k: statistics.median(r[k] for r in rows) for k in ("mttr_s", "gap_s", "detect_s")}
    spread = {k: [min(r[k] for r in rows), max(r[k] for r in rows)] for k in ("mttr_s", "gap_s", "load_avg_1min")}
    return {"kills": kills, "fault": fault, "median": med, "min_max": spread, "samples": rows,
            "load_avg_5min": round(os.getloadavg()[1], 2)}


def violated_windows(t0: datetime, t1: datetime) -> tuple[int, int]:
    """(violated, observed) 1-second windows of the stage's output in [t0, t1)."""
    best = {int(r.sec): float(r.p95) for r in q("p95_per_second", a=t0, b=t1)}
    commits = [float(r.at_s) for r in q("commit_times", b=t1)]
    violated, j, last = 0, 0, None
    start, end = int(t0.timestamp()), int(t1.timestamp())
    for s in range(start, end):
        while j < len(commits) and commits[j] < s + 1:
            last, j = commits[j], j + 1
        stalled = last is None or (s + 1 - last) * 1000 > R_MAX_MS
        if stalled or (best.get(s) is not None and best[s] > R_MAX_MS):
            violated += 1
    return violated, end - start


def hours(t0: datetime, t1: datetime) -> tuple[float, float]:
    rows = q("run_spans", b=t1)
    run_s = core_s = 0.0
    for r in rows:
        s = max(0.0, (min(r.z, t1) - max(r.a, t0)).total_seconds())
        run_s += s
        core_s += s * r.cores
    return core_s / 3600, run_s / 3600


def setup_part(name: str, reg: registry.Registry, seconds: float, kill_mtbf: float, slow_mtbf: float,
               seed: int) -> dict:
    reset()
    path = "bench/in"
    stop = threading.Event()
    feeder = feed(path, seconds + 30, seed, stop)
    stages.start_stage(SID, reg)
    replicas.reconcile(reg, wait_s=120)
    sup, sup_stop, sup_thread = supervisor.start_in_thread(reg, supervisor.SupervisorOptions(wait_s=90))
    wait(lambda: q("commits_with_rows")[0][0] >= 3, 120, "first commits")
    managed = reg.stage(SID)[2].redundancy is not None
    replan_stop = threading.Event()

    def replan_loop():
        while not replan_stop.wait(10):
            try:
                control.replan("bench", decided_by="bench")
            except Exception as e:  # noqa: BLE001 - keep re-planning through a restart
                say(f"replan failed: {e}")

    planner = threading.Thread(target=replan_loop, daemon=True)
    if managed:
        planner.start()
    t0 = datetime.now(UTC)
    sent = faults.run_schedule(SID, [registry.Fault(kind="driver_kill", mtbf_s=kill_mtbf),
                                     registry.Fault(kind="slow_batch", mtbf_s=slow_mtbf, magnitude_s=3.0,
                                                    magnitude_sd_s=1.0)],
                               seconds, seed=seed, progress=say)
    t1 = datetime.now(UTC)
    replan_stop.set()
    stop.set()
    feeder.join(30)
    want = oracles.expected("wordcount", generator.read_valid_records(registry.resolve_path(path)))
    try:
        wait(lambda: oracles.actual(db.engine(), SID, "wordcount") == want, 300, "sink = ground truth", 2)
        exact = True
    except TimeoutError:
        exact = False
    got = oracles.actual(db.engine(), SID, "wordcount")
    over = sum(1 for k, v in got.items() if k in want and v != want[k])
    sup_stop.set()
    sup_thread.join(120)
    terminate_all_drivers()
    fails = q("failures_recovered_since", a=t0)
    violated, observed = violated_windows(t0, t1)
    core_h, run_h = hours(t0, t1)
    replica_moves = q("replica_decisions")
    row = {
        "setup": name, "seconds": round((t1 - t0).total_seconds()), "faults": len(sent),
        "kills": sum(1 for s in sent if s.kind == "driver_kill" and s.role),
        "failures": len(fails),
        "mttr_s": statistics.median(f.mttr_ms / 1000 for f in fails) if fails else None,
        "gap_per_failure_s": statistics.median(f.downtime_ms / 1000 for f in fails) if fails else None,
        "violated_windows": violated, "observed_windows": observed,
        "core_h": round(core_h, 4), "run_h": round(run_h, 4),
        "sink_equals_truth": exact, "keys_wrong": over, "replica_decisions": [tuple(r) for r in replica_moves],
        "load_avg_5min": round(os.getloadavg()[1], 2),
    }
    say(f"{name}: {row}")
    return row


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--seconds", type=float, default=180)
    p.add_argument("--kill-mtbf", type=float, default=60)
    p.add_argument("--slow-mtbf", type=float, default=30)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--rate", type=int, default=50, help="rows per second of the realtime feed")
    p.add_argument("--skip-mttr", action="store_true")
    p.add_argument("--skip-setups", action="store_true", help="part 1 only")
    p.add_argument("--quick", action="store_true", help="3 kills, 90 s per setup")
    p.add_argument("--cluster", action="store_true",
                   help="part 1 only, on a cluster pool of the embedded Spark cluster (results: ha_cluster.json)")
    p.add_argument("--load", type=int, default=0, help="busy loops at the data plane's niceness during part 1")
    p.add_argument("--fault", choices=("kill", "sigstop"), default="kill",
                   help="part 1's fault: kill -9 of the driver's process group, or SIGSTOP of it (warm spares only)")
    args = p.parse_args(argv)
    if args.fault == "sigstop" or args.load:
        args.skip_setups = True
    if args.quick:
        args.kills, args.seconds = 3, 90
    return args


# Part 2's setups: (name, reg_for's keywords).
SETUPS: list[tuple[str, dict]] = [("(a) one run, fast failover", {}), ("(b) two static replicas", {"replicas_": 2}),
                                  ("(c) redundancy manager", {"managed": True})]


def measure(args: argparse.Namespace) -> dict:
    """Part 1 (MTTR, warm spares then cold starts) and part 2 (the three setups), on a site of its own."""
    out: dict = {"machine": machine_notes(args.cluster), "args": vars(args)}
    with scratch_run(SCRATCH_DB, "streamops-bench-ha-", teardown=spark_cluster.down if args.cluster else None):
        if args.cluster:
            spark_cluster.up(workers=1, cores_per_worker=3, memory_per_worker="6g", progress=say)
        if args.load:
            with busy_loops(args.load):
                out["mttr"] = mttr_part(args.kills, cluster=args.cluster, fault=args.fault)
        elif not args.skip_mttr:
            out["mttr"] = mttr_part(args.kills, cluster=args.cluster, fault=args.fault)
            if args.fault == "kill":
                out["mttr_cold"] = mttr_part(max(3, args.kills // 2), warm_spares=False, cluster=args.cluster)
        out["setups"] = [] if args.skip_setups or args.cluster else [
            setup_part(name, reg_for("bench/in", **kw), args.seconds, args.kill_mtbf, args.slow_mtbf, args.seed)
            for name, kw in SETUPS]
    return out


def main(argv: list[str] | None = None) -> dict:
    global RATE
    args = _args(argv)
    RATE = args.rate
    out = measure(args)
    if args.load:
        write_result(f"ha_load{args.load}_nice{processes.DATA_PLANE_NICE}.json", out, args)
        m, mm = out["mttr"]["median"], out["mttr"]["min_max"]
        console.print(f"{args.load} busy loops at nice {processes.DATA_PLANE_NICE}, the drivers too: MTTR median "
                      f"{m['mttr_s']:.1f}s ({mm['mttr_s'][0]:.1f}-{mm['mttr_s'][1]:.1f}), detection "
                      f"{m['detect_s']:.1f}s, output gap {m['gap_s']:.1f}s, load {mm['load_avg_1min']}")
    elif args.fault == "sigstop":
        write_result("ha_cluster_sigstop.json" if args.cluster else "ha_sigstop.json", out, args)
        print_cluster_mttr(out, "SIGSTOP of the driver", "a cluster" if args.cluster else "a local")
    elif args.cluster:
        write_result("ha_cluster.json", out, args)
        print_cluster_mttr(out)
    else:
        write_result("ha_quick.json" if args.quick else "ha.json", out, args)
        print_setups(out, args.kills)
    return out


def print_setups(out: dict, kills: int) -> None:
    """Part 2's table, each setup against (a), and part 1's MTTR."""
    base = out["setups"][0] if out["setups"] else {}
    rows = []
    for r in out["setups"]:
        extra = (r["core_h"] / base["core_h"] - 1) * 100 if base["core_h"] else 0
        change = (r["violated_windows"] / base["violated_windows"] - 1) * 100 if base["violated_windows"] else 0
        rows.append([r["setup"], str(r["failures"]), f"{r['mttr_s'] or 0:.1f}", f"{r['gap_per_failure_s'] or 0:.1f}",
                     f"{r['violated_windows']}/{r['observed_windows']} ({change:+.0f} % vs a)",
                     f"{r['core_h']:.3f} ({extra:+.0f} %)", f"{r['run_h']:.3f}", str(r["sink_equals_truth"])])
    cols = ("setup", "failures", "MTTR s", "gap/failure s", "violated 1 s windows", "core-h", "run-h", "sink = truth")
    console.print(table(f"HA under injected faults (wordcount, {RATE} rows/s, R_max 5 s)", cols, rows, left=cols))
    if "mttr" in out:
        m = out["mttr"]["median"]
        c = out["mttr_cold"]["median"]
        console.print(f"MTTR of a driver kill -9 with a warm spare, median of {kills}: {m['mttr_s']:.1f}s "
                      f"(detection {m['detect_s']:.1f}s, output gap {m['gap_s']:.1f}s); cold start, median of "
                      f"{out['mttr_cold']['kills']}: {c['mttr_s']:.1f}s")


def print_cluster_mttr(out: dict, fault: str = "a driver kill -9", pool: str = "a cluster") -> None:
    """Part 1: warm spares (on a cluster pool a registered driver with no executor), then cold starts."""
    cols = ("failover", "faults", "MTTR median", "min–max", "output gap median", "detection", "load 1m min–max")
    parts = [("warm spare", out["mttr"])] + ([("cold start", out["mttr_cold"])] if "mttr_cold" in out else [])
    rows = []
    for name, part in parts:
        m, mm = part["median"], part["min_max"]
        rows.append([name, str(part["kills"]), f"{m['mttr_s']:.1f}s", f"{mm['mttr_s'][0]:.1f}–{mm['mttr_s'][1]:.1f}s",
                     f"{m['gap_s']:.1f}s", f"{m['detect_s']:.1f}s",
                     f"{mm['load_avg_1min'][0]:.1f}–{mm['load_avg_1min'][1]:.1f}"])
    console.print(table(f"MTTR of {fault} on {pool} pool (wordcount, 1 s trigger)", cols, rows, left=cols))


if __name__ == "__main__":
    main()
