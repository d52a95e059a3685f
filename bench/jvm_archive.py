"""Cold Spark JVMs with and without the class archive (streamops.jvm_archive).

Each run is a fresh Python process with a fresh driver JVM (`spark_apps.stage.build_session`),
local or on the embedded cluster (then its executor is fresh too), that runs one stateful
streaming batch like a stage's first: a file source, a Python UDF, RocksDB state, a Python sink.
The runs alternate archive on and off (STREAMOPS_JVM_ARCHIVE), so both see the same machine.
Reported per mode: the median and min–max of the session's start (JVM start, and on the cluster
the executor's registration) and of the first batch, and their ratio off/on.

    .venv/bin/python bench/jvm_archive.py --runs 5 [--cluster] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "plugins"), str(REPO)]

from bench.harness import load_1m, summary, write_result  # noqa: E402
from streamops import jvm_archive  # noqa: E402

PROBE = r"""
import json, shutil, sys, tempfile, time
from pathlib import Path
sys.path[:0] = [sys.argv[2] + "/plugins", sys.argv[2]]
t0 = time.monotonic()
from pyspark.sql import functions as F
from spark_apps.stage import build_session
master = sys.argv[1] or None
spark = build_session("jvm-archive-bench", 1, 2, master=master)
t1 = time.monotonic()
work = Path(tempfile.mkdtemp())
(work / "in").mkdir()
(work / "in" / "0.json").write_text("".join('{"k": "key%d"}\n' % (i % 50) for i in range(2000)))
key_of = F.udf(lambda line: json.loads(line)["k"], "string")
q = (spark.readStream.format("text").load(str(work / "in")).select(key_of("value").alias("k")).groupBy("k").count()
     .writeStream.outputMode("update").foreachBatch(lambda b, i: b.rdd.foreachPartition(lambda r: sum(1 for _ in r)))
     .option("checkpointLocation", str(work / "ckpt")).trigger(availableNow=True).start())
q.awaitTermination()
t2 = time.monotonic()
spark.stop()
shutil.rmtree(work, ignore_errors=True)
print("RESULT", json.dumps({"session_s": round(t1 - t0, 3), "first_batch_s": round(t2 - t1, 3)}))
"""


def one_run(archive_on: bool, master: str | None) -> dict:
    env = {**os.environ, jvm_archive.ENV: "on" if archive_on else "off"}
    if master:
        from streamops import spark_cluster

        env.update(spark_cluster.client_env())
    out = subprocess.run([sys.executable, "-c", PROBE, master or "", str(REPO)], env=env, capture_output=True,
                         text=True, timeout=300)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"probe failed (exit {out.returncode}): {out.stderr[-1500:]}")
    return json.loads(line[len("RESULT "):])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5, help="runs per mode (on, off), alternating")
    p.add_argument("--cluster", action="store_true", help="on the embedded Spark cluster (started if needed)")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "jvm_archive.json")
    args = p.parse_args()
    path = jvm_archive.build(progress=print)
    if path is None:
        sys.exit("no JDK: nothing to measure")
    master = None
    if args.cluster:
        from streamops import spark_cluster

        cluster, _ = spark_cluster.up(workers=1, cores_per_worker=2, memory_per_worker="2g", progress=print)
        master = cluster.url
    samples: dict[str, list[dict]] = {"on": [], "off": []}
    for i in range(args.runs):
        for mode in ("off", "on") if i % 2 else ("on", "off"):
            r = one_run(mode == "on", master)
            samples[mode].append({**r, "load_1m": load_1m()})
            print(f"run {i + 1}/{args.runs} archive {mode:3}: session {r['session_s']:.2f}s, "
                  f"first batch {r['first_batch_s']:.2f}s")
    result = {"cluster": args.cluster, "runs": args.runs, "archive": str(path),
              "archive_mb": path.stat().st_size >> 20, "when": time.strftime("%Y-%m-%d %H:%M:%S"),
              "cpus": os.cpu_count(), "samples": samples}
    for key in ("session_s", "first_batch_s"):
        on, off = (summary([s[key] for s in samples[m]]) for m in ("on", "off"))
        result[key] = {"on": on, "off": off, "off_over_on": round(off["median"] / on["median"], 2)}
        print(f"{key}: on {on['median']:.2f}s ({on['min']:.2f}-{on['max']:.2f}), off {off['median']:.2f}s "
              f"({off['min']:.2f}-{off['max']:.2f}): {result[key]['off_over_on']}x")
    print(f"results in {write_result(args.out, result, args)}")


if __name__ == "__main__":
    main()
