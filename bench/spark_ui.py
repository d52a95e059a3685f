"""What a driver's Spark UI costs (issue 30 part 3): the same stage and load with the UI on and
off, alternating, so both see the same machine.

One run: a wordcount stage (1 core of a local pool, a 2 s trigger) starts in a pool with
`spark_ui` on or off; a realtime feed of RATE rows/s starts once it runs. After SKIP batches
that read input (the warm-up's tail), BATCHES more are measured. From `stage_metrics` and /proc:

    batch_ms   median batch duration of the measured batches
    rss_mb     resident memory of the driver's process tree (Python, its JVM, Python workers)
               at the end of the measured batches
    cpu_cores  CPU time of that tree over the measured batches / their wall time

With the UI on, the run also checks that its Structured Streaming tab answers (after measuring,
so no page request falls inside the measured batches). Reported per mode: median and min–max of
each over the runs that kept up with the feed, the ratio on/off of the medians and the median of
the ratios of each pair (on and off run one after the other). Scratch database
`streamops_bench_spark_ui` and a temporary STREAMOPS_HOME, both removed at the end.

    .venv/bin/python bench/spark_ui.py [--runs 3] [--batches 20] [--rate 300]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "plugins"), str(REPO)]

import httpx  # noqa: E402

from bench.harness import end_run, load_1m, scratch_run, summary, write_result  # noqa: E402
from demo.stages import demo_job  # noqa: E402
from streamops import generator, registry  # noqa: E402
from streamops.execute import stages  # noqa: E402
from streamops.store import db  # noqa: E402
from streamops.waiting import wait_until  # noqa: E402

SCRATCH_DB = "streamops_bench_spark_ui"
APP = "bench"
TRIGGER_MS = 2000
SKIP = 4  # batches with input before the measured ones


def _registry(stage: str, path: str, spark_ui: bool) -> registry.Registry:
    return registry.parse({
        "pools": {"p": {"cores": 2, "spark_ui": spark_ui}},
        "apps": {APP: {"r_max_ms": 10_000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                       "stages": {stage: {**demo_job("wordcount", {"kind": "files", "path": path,
                                                                      "max_files_per_trigger": 20}),
                                          "cores": {"initial": 1, "min": 1, "max": 1}, "state_partitions": 2,
                                          "trigger_interval_ms": TRIGGER_MS, "pool": "p",
                                          "policy": {"kind": "edf"}}}}},
    })


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (the driver's JVM and Python workers)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            with contextlib.suppress(OSError):
                todo += [int(c) for c in (task / "children").read_text().split()]
    return out


def _rss_mb(pids: list[int]) -> float:
    total = 0
    for p in pids:
        try:
            line = next(x for x in Path(f"/proc/{p}/status").read_text().splitlines() if x.startswith("VmRSS:"))
            total += int(line.split()[1])
        except (OSError, StopIteration):
            pass
    return round(total / 1024, 1)


def _cpu_s(pids: list[int]) -> float:
    ticks = 0
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError):
            pass
    return ticks / os.sysconf("SC_CLK_TCK")


def one_run(i: int, ui: bool, batches: int, rate: int, say) -> dict:
    stage = f"ui{i}{'on' if ui else 'off'}"
    sid = registry.stage_id(APP, stage)
    reg = _registry(stage, f"{stage}/in", ui)
    out = registry.resolve_path(f"{stage}/in")
    stop = threading.Event()
    feed = threading.Thread(target=generator.generate, daemon=True, kwargs=dict(
        out_dir=out, kind="web", trace=f"constant:rate={rate}", seed=200 + i, duration_s=3600, realtime=True,
        run="live", stop_event=stop))
    sample: dict = {"run": i, "spark_ui": ui, "load_1m_before": load_1m()}
    try:
        res = stages.start_stage(sid, reg, wait_s=300)
        feed.start()

        def seen() -> list:
            return db.rows("bench/input_batches_of_run", d=res.deployment_id)
        if not wait_until(lambda: len(seen()) >= SKIP, 300, interval_s=0.2):
            raise TimeoutError(f"{SKIP} batches")
        pids = _tree(res.pid)
        cpu0, t0 = _cpu_s(pids), time.monotonic()
        if not wait_until(lambda: len(seen()) >= SKIP + batches, 60 + batches * TRIGGER_MS / 100, interval_s=0.2):
            raise TimeoutError(f"{SKIP + batches} batches")
        pids = _tree(res.pid)
        cpu1, t1 = _cpu_s(pids), time.monotonic()
        measured = seen()[SKIP:SKIP + batches]
        dep = db.row("bench/deployment", i=res.deployment_id)
        sample.update(batch_ms=statistics.median(b.batch_duration_ms for b in measured),
                      rss_mb=_rss_mb(pids), cpu_cores=round((cpu1 - cpu0) / (t1 - t0), 3),
                      rows_per_batch=statistics.median(b.input_rows for b in measured),
                      ui_url=dep.ui_url, load_1m_after=load_1m())
        if ui:
            sample["ui_status"] = httpx.get(f"{dep.ui_url}/StreamingQuery/", timeout=10).status_code
        say(f"  run {i} UI {'on ' if ui else 'off'}: batch {sample['batch_ms']:.0f} ms, rss {sample['rss_mb']:.0f} MB, "
            f"cpu {sample['cpu_cores']:.2f} cores, {sample['rows_per_batch']:.0f} rows/batch"
            + (f", UI {dep.ui_url} answers {sample['ui_status']}" if ui else ""))
        return sample
    finally:
        end_run(sid, reg, stop, feed, out.parent, "bench:spark_ui", say, deadline_s=20)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3, help="runs per mode (on, off), alternating")
    p.add_argument("--batches", type=int, default=20, help="measured batches per run")
    p.add_argument("--rate", type=int, default=300, help="rows per second of the realtime feed")
    args = p.parse_args(argv)
    samples: list[dict] = []
    with scratch_run(SCRATCH_DB, "streamops-bench-spark-ui-"):
        for i in range(args.runs):
            for ui in (False, True) if i % 2 else (True, False):
                try:
                    samples.append(one_run(i, ui, args.batches, args.rate, print))
                except Exception as e:  # noqa: BLE001 - a failed run is reported, the others still count
                    print(f"  run {i} UI {'on' if ui else 'off'}: {type(e).__name__}: {e}")
                    samples.append({"run": i, "spark_ui": ui, "error": f"{type(e).__name__}: {e}"})
    result: dict = {"args": vars(args), "trigger_ms": TRIGGER_MS, "when": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "cpus": os.cpu_count(), "samples": samples}
    # A run that fell behind (other work on the machine) reads more rows a batch: its batch time
    # says nothing about the UI. Only runs that kept up count; each pair (on and off one after
    # the other) gives a ratio, and their median is steadier than the ratio of the medians.
    per_batch = args.rate * TRIGGER_MS / 1000
    kept = [s for s in samples if "batch_ms" in s and s["rows_per_batch"] <= 1.1 * per_batch]
    result["kept_up"] = {"on": sum(s["spark_ui"] for s in kept), "off": sum(not s["spark_ui"] for s in kept)}
    print(f"runs that kept up ({per_batch:.0f} rows a batch): {result['kept_up']}")
    for key in ("batch_ms", "rss_mb", "cpu_cores"):
        on, off = (summary([s[key] for s in kept if s["spark_ui"] is mode]) for mode in (True, False))
        ratio = round(on["median"] / off["median"], 3) if on["median"] and off["median"] else None
        pairs = [a[key] / b[key] for a in kept for b in kept
                 if a["run"] == b["run"] and a["spark_ui"] and not b["spark_ui"] and b[key]]
        pair = round(statistics.median(pairs), 3) if pairs else None
        result[key] = {"on": on, "off": off, "on_over_off": ratio, "pair_ratios": [round(x, 3) for x in pairs],
                       "pair_ratio_median": pair}
        print(f"{key}: UI on {on['median']} ({on['min']}-{on['max']}), off {off['median']} "
              f"({off['min']}-{off['max']}): on/off {ratio}; per pair {result[key]['pair_ratios']}, median {pair}")
    print(f"results in {write_result('spark_ui.json', result, args)}")
    return result


if __name__ == "__main__":
    main()
