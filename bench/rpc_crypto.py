"""What Spark RPC encryption costs (issue 44 item 11): the same work on the embedded cluster with
`spark.network.crypto.enabled` on (spark_cluster.RPC_CRYPTO: AES-GCM, key exchange version 2) and
off, interleaved, so both see the same machine.

The bench's own cluster (a scratch STREAMOPS_HOME and database) differs from `spark up`'s in one
setting: `spark.network.crypto.saslFallback true`, so that a driver without encryption may
register with the master and an encrypted one may too. A driver's setting decides its own
traffic and its executors' (they get spark.network.* from it): the data path of an "on" driver is
the one `spark up`'s cluster gives every driver. Each sample checks the executors' command line
for the mode it claims.

1. Throughput (`--rounds`): one long-lived driver per mode (off, on, and io: on plus
   `spark.io.encryption.enabled` for the shuffle files), each with two 1-core executors; in each
   round, in rotating order, each driver runs
       shuffle_s  SHUFFLE_ROWS rows of 256 hex characters (about 130 MB, half of it fetched
                  from the other executor) repartitioned across its executors (noop sink)
       collect_s  COLLECT_MB MB of task results fetched by the driver (8 MB a task: block fetches)
   after one warm-up round that is not counted.
2. A stage (`--runs`): the demo wordcount stage (postgres sink: its closure carries the DSN) in
   an embedded pool of 2 one-core executors, a 2 s trigger, a realtime feed of RATE rows/s; the
   driver reads the mode from the conf file, rewritten before each run. After SKIP batches with
   input, BATCHES more are measured from `stage_metrics`: their median batch_ms, and the CPU of
   the driver's process tree and the worker's (its executors) over them.

Reported per mode: the median and min-max of each measure over the samples, the on/off ratio of
the medians, and the median of the per-pair ratios (on and off run one after the other).

    .venv/bin/python bench/rpc_crypto.py [--rounds 7] [--runs 5] [--batches 10] [--rate 300]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "plugins"), str(REPO)]

import psutil  # noqa: E402

from bench.harness import end_run, load_1m, scratch_run, summary, write_result  # noqa: E402
from demo.stages import demo_job  # noqa: E402
from streamops import generator, registry, spark_cluster  # noqa: E402
from streamops.execute import stages  # noqa: E402
from streamops.paths import write_private  # noqa: E402
from streamops.store import db  # noqa: E402
from streamops.waiting import wait_until  # noqa: E402

SCRATCH_DB = "streamops_bench_rpc_crypto"
APP = "bench"
TRIGGER_MS = 2000
SKIP = 3  # batches with input before the measured ones
SHUFFLE_ROWS = 500_000
COLLECT_MB = 64
# A mode's settings over RPC_CRYPTO (the bench's cluster lets both modes in: saslFallback true).
MODES = {"off": {"spark.network.crypto.enabled": "false"},
         "on": {},
         "io": {"spark.io.encryption.enabled": "true"}}

# A long-lived driver: one line on stdin, one round of jobs, one JSON line on stdout.
PROBE = r"""
import json, sys, time
import psutil
from pyspark.sql import SparkSession
s = (SparkSession.builder.master(sys.argv[1]).appName("rpc-crypto-bench-" + sys.argv[2])
     .config("spark.cores.max", "2").config("spark.executor.cores", "1").config("spark.executor.memory", "768m")
     .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4").getOrCreate())
sc = s.sparkContext
s.range(4).count()  # the executors registered
app = sc.applicationId
flags = sorted({a for p in psutil.process_iter(["cmdline"]) if app in (p.info["cmdline"] or [])
                for a in p.info["cmdline"] if a.startswith("-Dspark.network.crypto.enabled")})
# Not an executor startup setting: the executors get it (and the key) from the driver.
if sc.getConf().get("spark.io.encryption.enabled", "false") == "true":
    flags.append("driver:spark.io.encryption.enabled=true")
print("READY", json.dumps({"app": app, "flags": flags}), flush=True)
for line in sys.stdin:
    t0 = time.monotonic()
    # 256 hex characters a row: LZ4 (shuffle files) barely shrinks them, so they cross the wire.
    pad = "concat(sha2(cast(id as string), 512), sha2(cast(-id as string), 512)) as pad"
    df = s.range(0, int(sys.argv[3]), 1, 4).selectExpr("id", pad).repartition(4)
    df.write.format("noop").mode("overwrite").save()
    t1 = time.monotonic()
    rows = s.range(0, int(sys.argv[4]), 1, int(sys.argv[4]) // 8).selectExpr("repeat('x', 1048576) as s").collect()
    t2 = time.monotonic()
    assert len(rows) == int(sys.argv[4])
    print("ROUND", json.dumps({"shuffle_s": round(t1 - t0, 3), "collect_s": round(t2 - t1, 3)}), flush=True)
s.stop()
"""


def conf_text(secret: str, mode: str) -> str:
    values = {"spark.authenticate": "true", "spark.authenticate.secret": secret, **spark_cluster.RPC_CRYPTO,
              "spark.network.crypto.saslFallback": "true"}
    if mode == "off":
        values.update(MODES["off"])
    return "".join(f"{k} {v}\n" for k, v in values.items())


def executor_flags(root: int) -> list[str]:
    """The RPC crypto flag on the command lines of the executors under `root` (the worker)."""
    try:
        procs = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return []
    out = set()
    for p in procs:
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if "org.apache.spark.executor.CoarseGrainedExecutorBackend" in cmd:
            out |= {a for a in cmd if a.startswith("-Dspark.network.crypto.enabled")}
    return sorted(out)


def _cpu_s(pids: list[int]) -> float:
    total = 0.0
    for p in pids:
        try:
            t = psutil.Process(p).cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


def _tree(pid: int) -> list[int]:
    try:
        return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:
        return [pid]


# ------------------------------------------------------------------------------------ throughput

def throughput(url: str, conf: Path, rounds: int, say) -> list[dict]:
    """Rounds of the probe's jobs over one driver per mode, in rotating order (warm-up first)."""
    procs: dict[str, subprocess.Popen] = {}
    samples: list[dict] = []
    try:
        for mode, extra in MODES.items():  # started together: one JVM start's wait
            confs = " ".join(f"--conf {k}={v}" for k, v in extra.items())
            env = {**os.environ, "PYSPARK_SUBMIT_ARGS": f"--properties-file {conf} {confs} pyspark-shell"}
            procs[mode] = subprocess.Popen(
                [sys.executable, "-c", PROBE, url, mode, str(SHUFFLE_ROWS), str(COLLECT_MB)], env=env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for mode in MODES:
            ready = _line(procs[mode], "READY")
            say(f"  probe {mode}: {ready['app']}, executors {ready['flags']}")
            _check(mode, ready["flags"])
        order = list(MODES)
        for r in range(rounds + 1):
            for mode in order[r % len(order):] + order[:r % len(order)]:
                procs[mode].stdin.write("go\n")  # type: ignore[union-attr]
                procs[mode].stdin.flush()  # type: ignore[union-attr]
                res = _line(procs[mode], "ROUND")
                if r == 0:
                    say(f"  warm-up {mode}: shuffle {res['shuffle_s']:.2f}s, collect {res['collect_s']:.2f}s")
                    continue
                samples.append({"round": r, "mode": mode, **res, "load_1m": load_1m()})
                say(f"  round {r}/{rounds} {mode:3}: shuffle {res['shuffle_s']:.2f}s, collect {res['collect_s']:.2f}s")
    finally:
        for p in procs.values():
            if p.stdin:
                p.stdin.close()
        for p in procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
    return samples


def _line(proc: subprocess.Popen, tag: str) -> dict:
    for line in proc.stdout:  # type: ignore[union-attr]
        if line.startswith(tag + " "):
            return json.loads(line[len(tag) + 1:])
    raise RuntimeError(f"the probe exited (code {proc.wait()}) before {tag}")


def _check(mode: str, flags: list[str]) -> None:
    want = "-Dspark.network.crypto.enabled=" + ("false" if mode == "off" else "true")
    if want not in flags or (mode == "io") != ("driver:spark.io.encryption.enabled=true" in flags):
        raise RuntimeError(f"mode {mode}: its executors run with {flags}")


# ----------------------------------------------------------------------------------------- stage

def _registry(stage: str, path: str) -> registry.Registry:
    return registry.parse({
        "pools": {"p": {"cores": 2, "master": "embedded", "executor_memory": "768m", "spark_ui": False}},
        "apps": {APP: {"r_max_ms": 10_000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                       "stages": {stage: {**demo_job("wordcount", {"kind": "files", "path": path,
                                                                      "max_files_per_trigger": 20}),
                                          "cores": {"initial": 2, "min": 2, "max": 2}, "state_partitions": 2,
                                          "trigger_interval_ms": TRIGGER_MS, "pool": "p",
                                          "policy": {"kind": "edf"}}}}},
    })


def stage_run(i: int, mode: str, conf: Path, secret: str, worker_pid: int, batches: int, rate: int, say) -> dict:
    write_private(conf, conf_text(secret, mode))  # read by the driver the launcher starts now
    stage = f"c{i}{mode}"
    sid = registry.stage_id(APP, stage)
    reg = _registry(stage, f"{stage}/in")
    out = registry.resolve_path(f"{stage}/in")
    stop = threading.Event()
    feed = threading.Thread(target=generator.generate, daemon=True, kwargs=dict(
        out_dir=out, kind="web", trace=f"constant:rate={rate}", seed=300 + i, duration_s=3600, realtime=True,
        run="live", stop_event=stop))
    sample: dict = {"run": i, "mode": mode, "load_1m_before": load_1m()}
    try:
        res = stages.start_stage(sid, reg, wait_s=300)
        feed.start()

        def seen() -> list:
            return db.rows("bench/input_batches_of_run", d=res.deployment_id)
        if not wait_until(lambda: len(seen()) >= SKIP, 300, interval_s=0.2):
            raise TimeoutError(f"{SKIP} batches")
        flags = executor_flags(worker_pid)
        _check(mode, flags)
        pids = _tree(res.pid) + _tree(worker_pid)
        cpu0, t0 = _cpu_s(pids), time.monotonic()
        if not wait_until(lambda: len(seen()) >= SKIP + batches, 60 + batches * TRIGGER_MS / 100, interval_s=0.2):
            raise TimeoutError(f"{SKIP + batches} batches")
        cpu1, t1 = _cpu_s(_tree(res.pid) + _tree(worker_pid)), time.monotonic()
        measured = seen()[SKIP:SKIP + batches]
        sample.update(batch_ms=statistics.median(b.batch_duration_ms for b in measured),
                      cpu_cores=round((cpu1 - cpu0) / (t1 - t0), 3), executor_flags=flags,
                      rows_per_batch=statistics.median(b.input_rows for b in measured),
                      load_1m_after=load_1m())
        say(f"  run {i} {mode:3}: batch {sample['batch_ms']:.0f} ms, cpu {sample['cpu_cores']:.2f} cores, "
            f"{sample['rows_per_batch']:.0f} rows/batch, executors {flags}")
        return sample
    finally:
        end_run(sid, reg, stop, feed, out.parent, "bench:rpc_crypto", say, deadline_s=20)


# ------------------------------------------------------------------------------------------ main

def compare(samples: list[dict], key: str, mode: str, pair_key: str, say) -> dict:
    """`mode` against off for `key`: medians, their ratio, and the median of the per-pair ratios."""
    on, off = (summary([s[key] for s in samples if s["mode"] == m and key in s]) for m in (mode, "off"))
    ratio = round(on["median"] / off["median"], 3) if on["median"] and off["median"] else None
    pairs = [a[key] / b[key] for a in samples for b in samples if a[pair_key] == b[pair_key]
             and a["mode"] == mode and b["mode"] == "off" and key in a and b.get(key)]
    pair = round(statistics.median(pairs), 3) if pairs else None
    say(f"{key}: {mode} {on['median']} ({on['min']}-{on['max']}, n={on['n']}), off {off['median']} "
        f"({off['min']}-{off['max']}, n={off['n']}): {mode}/off {ratio}; pair ratios median {pair}")
    return {mode: on, "off": off, f"{mode}_over_off": ratio, "pair_ratios": [round(x, 3) for x in pairs],
            "pair_ratio_median": pair}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7, help="counted throughput rounds (each mode once a round)")
    p.add_argument("--runs", type=int, default=5, help="stage runs per mode (off, on), alternating")
    p.add_argument("--batches", type=int, default=10, help="measured batches per stage run")
    p.add_argument("--rate", type=int, default=300, help="rows per second of the stage's realtime feed")
    args = p.parse_args(argv)
    if os.environ.get(spark_cluster.ENV_MASTER):
        sys.exit(f"unset {spark_cluster.ENV_MASTER}: the bench measures its own embedded cluster")
    result: dict = {"args": vars(args), "trigger_ms": TRIGGER_MS, "shuffle_rows": SHUFFLE_ROWS,
                    "collect_mb": COLLECT_MB, "when": time.strftime("%Y-%m-%d %H:%M:%S"), "cpus": os.cpu_count(),
                    "rpc_crypto": spark_cluster.RPC_CRYPTO}
    runs: list[dict] = []
    with scratch_run(SCRATCH_DB, "streamops-bench-rpc-crypto-", teardown=lambda: spark_cluster.down(grace_s=5)):
        secret = secrets.token_hex(32)  # the site's home first: the conf lives in it
        conf = spark_cluster.conf_dir() / "spark-defaults.conf"
        conf.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(conf, conf_text(secret, "on"))
        cluster, _ = spark_cluster.up(workers=1, cores_per_worker=6, memory_per_worker="8g", progress=print)
        worker = cluster.workers[0].pid
        if args.rounds:
            print(f"throughput: {args.rounds} rounds of {SHUFFLE_ROWS} rows shuffled, {COLLECT_MB} MB collected")
            result["throughput_samples"] = throughput(cluster.url, conf, args.rounds, print)
        for i in range(args.runs):
            for mode in ("on", "off") if i % 2 else ("off", "on"):
                try:
                    runs.append(stage_run(i, mode, conf, secret, worker, args.batches, args.rate, print))
                except Exception as e:  # noqa: BLE001 - a failed run is reported, the others still count
                    print(f"  run {i} {mode}: {type(e).__name__}: {e}")
                    runs.append({"run": i, "mode": mode, "error": f"{type(e).__name__}: {e}"})
    result["stage_samples"] = runs
    for key in ("shuffle_s", "collect_s"):
        for mode in ("on", "io"):
            result[f"{key}_{mode}"] = compare(result.get("throughput_samples", []), key, mode, "round", print)
    per_batch = args.rate * TRIGGER_MS / 1000
    kept = [s for s in runs if "batch_ms" in s and s["rows_per_batch"] <= 1.1 * per_batch]
    result["kept_up"] = {m: sum(s["mode"] == m for s in kept) for m in ("on", "off")}
    print(f"stage runs that kept up ({per_batch:.0f} rows a batch): {result['kept_up']}")
    for key in ("batch_ms", "cpu_cores"):
        result[key] = compare(kept, key, "on", "run", print)
    # A run that fell behind reads more rows a batch (other work on the machine): said, not counted above.
    print("every stage run, kept up or not:")
    for key in ("batch_ms", "rows_per_batch"):
        result[f"{key}_all_runs"] = compare(runs, key, "on", "run", print)
    print(f"results in {write_result('rpc_crypto.json', result, args)}")
    return result


if __name__ == "__main__":
    main()
