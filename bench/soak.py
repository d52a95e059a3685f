"""A soak: stages run for `--minutes` on the embedded Spark cluster while random real faults of
every kind hit them, then the sinks are compared with the ground truth (issue 25).

Everything is private to the soak: a temporary STREAMOPS_HOME with its own embedded PostgreSQL
(so the soak may stop it) and its own embedded Spark cluster (1 worker, 2 cores). Two wordcount
stages are fed in real time (`--rate` rows/s each): `soak.cl` on the cluster pool and `soak.lo`
on a local pool (warm spares). The supervisor runs in this process, and a watchdog pass every
60 s stands in for the watchdog DAG.

Faults, one at a time, at exponential gaps (mean `--fault-every` s, at least 20 s), the kind
drawn uniformly from:
  the injector's kinds, sent to a random stage: slow_batch (3 s), driver_kill, executor_kill
  (cluster stage), heartbeat_cut (20 s), db_outage (10 s);
  pg_stop: the embedded PostgreSQL stopped for 30 s, then started;
  master_kill / worker_kill: kill -9 of the Spark master / worker JVM;
  sigstop: a random stage's driver SIGSTOPped for 40 s, then SIGCONT;
  pg_sigstop: every PostgreSQL process SIGSTOPped for 45 s (a stalled database), then SIGCONT;
  metrics_lock: `stage_metrics` held under an ACCESS EXCLUSIVE lock for 60 s (a long migration).
The kinds are dealt from a shuffled deck, so that each comes up before any comes up twice.

At the end the feeds stop, and each sink must equal the oracle of its input files: rows lost
(keys missing or counted short) and doubled (counted over) are reported, with the stages given
up, the failures by kind (MTTR and output gap medians, any left open) and availability: the
share of 1-second windows in which the stage's last commit was at most R_max (5 s) old.
A driver killed as hung (`stale_heartbeat`, `stalled`, `stopped`) while no fault aimed at that
stage's driver (sigstop, heartbeat_cut) was under way or just over is a healthy driver killed:
they are counted and listed.

    .venv/bin/python bench/soak.py [--minutes 60] [--fault-every 90] [--rate 20] [--seed 11] [--kinds a,b]

Writes bench/results/soak.json (soak_quick.json for runs under 10 minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
from rich.console import Console
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.harness import machine_notes, table, write_result  # noqa: E402
from demo import oracles  # noqa: E402
from demo.stages import demo_job
from streamops import generator, registry, spark_cluster  # noqa: E402
from streamops.execute import faults, stages, supervisor, watchdog  # noqa: E402
from streamops.execute.launcher import terminate_all_drivers  # noqa: E402
from streamops.store import db, embedded, ledger, migrate  # noqa: E402

R_MAX_MS = 5000
STAGES = {"soak.cl": "soak/cl", "soak.lo": "soak/lo"}
FAULT_KINDS = ("slow_batch", "driver_kill", "executor_kill", "heartbeat_cut", "db_outage",
               "pg_stop", "master_kill", "worker_kill", "sigstop", "pg_sigstop", "metrics_lock")
# Failures whose recovery kills the driver as hung, and the faults that make a driver look so.
KILLED_AS_HUNG = ("stale_heartbeat", "stalled", "stopped")
AIMED_AT_DRIVER = ("sigstop", "heartbeat_cut")
AIMED_GRACE_S = 180  # a kill this long after such a fault ended is still its doing
console = Console(width=170)


def say(msg: str) -> None:
    console.print(f"[dim]{datetime.now():%H:%M:%S}[/] {msg}")


def soak_registry() -> registry.Registry:
    def stage(path: str, pool: str) -> dict:
        return {**demo_job("wordcount", {"kind": "files", "path": path, "max_files_per_trigger": 4}),
                "cores": {"initial": 1, "max": 1}, "state_partitions": 2, "trigger_interval_ms": 1000, "pool": pool}
    return registry.parse({
        "pools": {"cluster": {"master": "embedded", "cores": 2, "executor_cores": 1, "executor_memory": "512m"},
                  "local": {"cores": 2}},
        "apps": {"soak": {"r_max_ms": R_MAX_MS, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                          "stages": {"cl": stage(STAGES["soak.cl"], "cluster"),
                                     "lo": stage(STAGES["soak.lo"], "local")}}},
    })


def q(name: str, **params):
    """The rows of the benchmark's query sql/bench/<name>.sql."""
    return db.rows(f"bench/{name}", **params)


def live_pid(sid: str) -> int | None:
    run = ledger.latest_run(sid, live=True)
    return run.pid if run is not None and run.status == "running" and run.pid else None


def postgres_pids() -> list[int]:
    """The embedded server's postmaster and its children (backends, checkpointer, walwriter…)."""
    c = embedded.load_record()
    head = (Path(c.datadir) / "postmaster.pid").read_text().split()[0]
    master = psutil.Process(int(head))
    return [master.pid, *(p.pid for p in master.children(recursive=True))]


def inject(kind: str, sid: str, rng: random.Random) -> str:
    """Cause one fault (aimed at `sid` where it has a target); returns what was done."""
    if kind in ("slow_batch", "driver_kill", "executor_kill", "heartbeat_cut", "db_outage"):
        magnitude = {"slow_batch": 3.0, "heartbeat_cut": 20.0, "db_outage": 10.0}.get(kind)
        return f"{sid}: {faults.send(sid, kind, magnitude, rng=rng, source='soak').outcome}"
    if kind == "pg_stop":
        embedded.down()
        time.sleep(30)
        embedded.up()
        return "PostgreSQL stopped for 30 s"
    if kind == "pg_sigstop":
        pids = postgres_pids()
        for pid in pids:  # root: the postgres user's processes are ours to signal
            os.kill(pid, signal.SIGSTOP)
        time.sleep(45)
        for pid in reversed(pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        return f"{len(pids)} PostgreSQL processes SIGSTOPped for 45 s, then SIGCONT"
    if kind == "metrics_lock":
        with db.engine().connect() as locker:
            locker.execute(text("LOCK TABLE stage_metrics IN ACCESS EXCLUSIVE MODE"))
            time.sleep(60)
            locker.rollback()
        return "stage_metrics locked ACCESS EXCLUSIVE for 60 s"
    c = spark_cluster.load_record()
    if kind == "master_kill":
        os.kill(c.master_pid, signal.SIGKILL)
        return f"kill -9 of the Spark master (pid {c.master_pid})"
    if kind == "worker_kill":
        os.kill(c.workers[0].pid, signal.SIGKILL)
        return f"kill -9 of Spark worker-0 (pid {c.workers[0].pid})"
    pid = live_pid(sid)
    if pid is None:
        return f"{sid}: no running driver to SIGSTOP"
    os.killpg(pid, signal.SIGSTOP)  # the driver's process group: its JVM too
    time.sleep(40)
    try:
        os.killpg(pid, signal.SIGCONT)
    except ProcessLookupError:
        return f"{sid}: driver {pid} SIGSTOPped for 40 s; replaced and killed meanwhile"
    return f"{sid}: driver {pid} SIGSTOPped for 40 s, then SIGCONT"


def watchdog_loop(reg: registry.Registry, stop: threading.Event) -> None:
    """The watchdog DAG's minute: a pass, and the supervisor restarted if it died."""
    while not stop.wait(60):
        try:
            watchdog.cycle(reg, wait_s=120)
        except Exception as e:  # noqa: BLE001 - the DAG's next run tries again
            say(f"watchdog pass failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}")


def availability(sid: str, t0: datetime, t1: datetime) -> float:
    """Share of 1-second windows in [t0, t1) whose last commit of `sid` was at most R_max old."""
    commits = [float(r.at_s) for r in q("stage_commit_times", s=sid, b=t1)]
    ok, j, last = 0, 0, None
    start, end = int(t0.timestamp()), int(t1.timestamp())
    for s in range(start, end):
        while j < len(commits) and commits[j] < s + 1:
            last, j = commits[j], j + 1
        ok += last is not None and (s + 1 - last) * 1000 <= R_MAX_MS
    return ok / max(1, end - start)


def healthy_drivers_killed(kills, faults: list[dict]) -> list[dict]:
    """The kills of drivers as hung that no fault aimed at that stage's driver explains."""
    def explained(k) -> bool:
        return any(f["kind"] in AIMED_AT_DRIVER and f["stage"] == k.stage_id
                   and f["began"] <= k.killed_at <= f["ended"] + timedelta(seconds=AIMED_GRACE_S)
                   for f in faults)
    return [{"stage": k.stage_id, "kind": k.kind, "killed_at": k.killed_at, "detail": k.detail}
            for k in kills if not explained(k)]


def compare(sid: str) -> dict:
    want = oracles.expected("wordcount", generator.read_valid_records(registry.resolve_path(STAGES[sid])))
    got = oracles.actual(db.engine(), sid, "wordcount")
    lost = sum(max(0, n - got.get(k, 0)) for k, n in want.items())
    doubled = sum(max(0, n - want.get(k, 0)) for k, n in got.items())
    return {"keys": len(want), "rows": sum(want.values()), "lost": lost, "doubled": doubled, "exact": got == want}


def _args(argv: list[str] | None) -> tuple[argparse.Namespace, tuple[str, ...]]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=60)
    p.add_argument("--fault-every", type=float, default=90, help="mean seconds between faults")
    p.add_argument("--rate", type=int, default=20, help="rows per second fed to each stage")
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--kinds", default=",".join(FAULT_KINDS), help="the fault kinds to deal, comma-separated")
    p.add_argument("--settle", type=float, default=600, help="seconds the sinks get to catch up at the end")
    args = p.parse_args(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    if unknown := set(kinds) - set(FAULT_KINDS):
        p.error(f"--kinds: unknown {', '.join(sorted(unknown))}; known: {', '.join(FAULT_KINDS)}")
    return args, kinds


@contextlib.contextmanager
def soak_site() -> Iterator[None]:
    """A home, an embedded PostgreSQL and a Spark cluster of the soak's own (the faults stop and
    kill them, so not the scratch site on the server the tests use), all removed afterwards."""
    home = Path(tempfile.mkdtemp(prefix="streamops-soak-"))
    os.environ["STREAMOPS_HOME"] = str(home)
    os.environ.pop("STREAMOPS_DATABASE_URL", None)
    os.environ.pop(spark_cluster.ENV_MASTER, None)
    pg, _ = embedded.up()
    os.environ["STREAMOPS_DATABASE_URL"] = pg.url("streamops")
    db.engine.cache_clear()
    migrate.apply(db.engine())
    spark_cluster.up(workers=1, cores_per_worker=2, memory_per_worker="3g", progress=say)
    try:
        yield
    finally:
        terminate_all_drivers()
        db.engine().dispose()
        spark_cluster.down()
        pg_dir = Path(embedded.load_record().datadir).parent
        embedded.down()
        shutil.rmtree(home, ignore_errors=True)
        if pg_dir.is_relative_to("/var/tmp"):  # a 0700 home's cluster lives there (embedded._pick_datadir)
            shutil.rmtree(pg_dir, ignore_errors=True)


def deal_faults(args: argparse.Namespace, kinds: tuple[str, ...], t0: datetime) -> list[dict]:
    """Random faults, each kind once a round in a shuffled deck, until --minutes are over."""
    rng = random.Random(args.seed)
    faults: list[dict] = []
    ends = time.monotonic() + args.minutes * 60
    deck: list[str] = []
    while True:
        gap = max(20.0, rng.expovariate(1 / args.fault_every))
        if time.monotonic() + gap >= ends:
            break
        time.sleep(gap)
        if not deck:
            deck = rng.sample(kinds, len(kinds))
        kind = deck.pop()
        sid = rng.choice(sorted(STAGES)) if kind != "executor_kill" else "soak.cl"
        began = datetime.now(UTC)
        try:
            did = inject(kind, sid, rng)
        except Exception as e:  # noqa: BLE001 - a fault that could not be caused is reported, not fatal
            did = f"not caused: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        at = (began - t0).total_seconds()
        faults.append({"at_s": round(at), "kind": kind, "stage": sid, "began": began, "ended": datetime.now(UTC),
                       "did": did})
        say(f"fault {len(faults)} at {at / 60:.1f} min: {kind}: {did}")
    time.sleep(max(0.0, ends - time.monotonic()))
    return faults


def outcome(args: argparse.Namespace, t0: datetime, t1: datetime, faults: list[dict]) -> dict:
    """Once the sinks caught up (or --settle is over): each stage against the truth, the failures."""
    say("feeds stopped; waiting for the sinks to catch up")
    settle_ends = time.monotonic() + args.settle
    while time.monotonic() < settle_ends and not all(compare(sid)["exact"] for sid in STAGES):
        time.sleep(10)
    fails = q("failures_since", a=t0)
    return {
        "stages": {sid: {**compare(sid), "availability": round(availability(sid, t0, t1), 5)} for sid in STAGES},
        "failures": {
            "by_kind": dict(Counter(f.kind for f in fails)),
            "open": [{"id": f.id, "stage": f.stage_id, "kind": f.kind, "detected_at": f.detected_at,
                      "detail": f.detail} for f in q("failures_open", a=t0)],
            "gave_up": sum(1 for f in fails if f.status == "gave_up"),
            "mttr_median_s": statistics.median(f.mttr_ms / 1000 for f in fails if f.mttr_ms) if fails else None,
            "gap_median_s": statistics.median(f.downtime_ms / 1000 for f in fails if f.downtime_ms) if fails else None,
        },
        "stages_given_up": [r.stage_id for r in q("stages_given_up")],
        "healthy_killed": healthy_drivers_killed(q("failures_killed_as_hung", a=t0, kinds=list(KILLED_AS_HUNG)),
                                                 faults),
        "minutes": round((t1 - t0).total_seconds() / 60, 1),
    }


def main(argv: list[str] | None = None) -> dict:
    args, kinds = _args(argv)
    with soak_site():
        reg = soak_registry()
        stop_feed, stop_dog = threading.Event(), threading.Event()
        feeders = [threading.Thread(target=generator.generate, daemon=True, kwargs=dict(
            out_dir=registry.resolve_path(path), kind="web", trace=f"constant:rate={args.rate}", seed=i + 1,
            duration_s=args.minutes * 60 + 60, stop_event=stop_feed)) for i, path in enumerate(STAGES.values())]
        out: dict = {"machine": machine_notes(cluster=True), "args": vars(args), "faults": []}
        sup_stop = sup_thread = None
        try:
            for t in feeders:
                t.start()
            for sid in STAGES:
                stages.start_stage(sid, reg, wait_s=180)
                say(f"{sid}: running")
            _, sup_stop, sup_thread = supervisor.start_in_thread(reg, supervisor.SupervisorOptions(wait_s=120), say)
            threading.Thread(target=watchdog_loop, args=(reg, stop_dog), daemon=True).start()
            t0 = datetime.now(UTC)
            out["faults"] = deal_faults(args, kinds, t0)
            t1 = datetime.now(UTC)
            stop_feed.set()
            for t in feeders:
                t.join(30)
            out.update(outcome(args, t0, t1, out["faults"]))
        finally:
            stop_dog.set()
            stop_feed.set()
            if sup_stop is not None:
                sup_stop.set()
                sup_thread.join(120)
    write_result("soak.json" if args.minutes >= 10 else "soak_quick.json", out, args)
    print_soak(out)
    return out


def print_soak(out: dict) -> None:
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(Counter(f["kind"] for f in out["faults"]).items()))
    cols = ("stage", "rows", "lost", "doubled", "sink = truth", "availability")
    console.print(table(f"Soak: {out['minutes']} min, {len(out['faults'])} faults ({kinds})", cols,
                        [[sid, str(r["rows"]), str(r["lost"]), str(r["doubled"]), str(r["exact"]),
                          f"{r['availability'] * 100:.2f} %"] for sid, r in out["stages"].items()], left=cols))
    f = out["failures"]
    console.print(f"failures: {f['by_kind']}; open at the end {len(f['open'])}, given up {f['gave_up']}; "
                  f"MTTR median {f['mttr_median_s'] or 0:.1f}s, output gap median {f['gap_median_s'] or 0:.1f}s; "
                  f"stages given up: {out['stages_given_up'] or 'none'}")
    console.print(f"healthy drivers killed as hung: {len(out['healthy_killed'])}"
                  + "".join(f"\n  {k['killed_at']:%H:%M:%S} {k['stage']} {k['kind']}: {k['detail']}"
                            for k in out["healthy_killed"]))
    for o in f["open"]:
        console.print(f"open at the end: failure {o['id']} {o['stage']} {o['kind']} since {o['detected_at']:%H:%M:%S}: "
                      f"{o['detail']}")


if __name__ == "__main__":
    main()
