"""The first batch after a start and after a live scale-out, against the steady batch time
(issue 28 item 1: the first batch takes at most 2x the steady one). `bench/reconfig.py
--cluster --first-batch-runs N` runs it on its embedded cluster.

One run: a new wordcount stage of the demo's shape (4 s trigger, 1 core of a 2-core pool of
1-core executors) starts, with or without its warm-up (`stages.start_stage(warm_up=...)`); the
realtime feed (200 rows/s) starts once the stage runs, as `make demo` does; after 10 batches
that read input it scales out live to 2 cores and runs 5 batches more. From `stage_metrics`:

    start_ratio  = duration of the first batch with input / median of batches 4-10
    live_ratio   = duration of the first batch that started after the executors were ready /
                   median of the 4 batches after it (2 executors)

The runs alternate cold (no warm-up) and warm, so both see the same machine.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable

from bench.harness import end_run, load_1m, summary
from demo.stages import demo_job
from streamops import generator, quality, registry
from streamops.execute import reconfigure, stages
from streamops.store import db
from streamops.waiting import wait_until

APP = "bench"
TRIGGER_MS = 4000
RATE = 200
BATCHES_BEFORE = 10  # the first, then 3 to skip, then 7 for the steady median
BATCHES_AFTER = 4  # after the first one past the scale-out: its steady median


def _registry(stage: str, path: str) -> registry.Registry:
    return registry.parse({
        "pools": {"fb": {"master": "embedded", "cores": 2, "executor_cores": 1, "executor_memory": "1g"}},
        "apps": {APP: {"r_max_ms": 10_000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                       "stages": {stage: {**demo_job("wordcount", {"kind": "files", "path": path,
                                                                      "max_files_per_trigger": 20}),
                                          "cores": {"initial": 1, "min": 1, "max": 2}, "state_partitions": 4,
                                          "trigger_interval_ms": TRIGGER_MS, "pool": "fb",
                                          "policy": {"kind": "edf"}}}}},
    })


def _batches(dep_id: int) -> list:
    return db.rows("bench/input_batches_of_run", d=dep_id)


def _wait(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    if not wait_until(cond, timeout_s, interval_s=1.0):
        raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def one_run(i: int, warm: bool, say: Callable[[str], None]) -> dict:
    stage = f"fb{i}{'w' if warm else 'c'}"
    sid = registry.stage_id(APP, stage)
    reg = _registry(stage, f"{stage}/in")
    out = registry.resolve_path(f"{stage}/in")
    stop = threading.Event()
    feed = threading.Thread(target=generator.generate, daemon=True, kwargs=dict(
        out_dir=out, kind="web", trace=f"constant:rate={RATE}", seed=100 + i, duration_s=3600, realtime=True,
        run="live", stop_event=stop))
    sample: dict = {"run": i, "warm_up": warm, "loadavg_1m_before": load_1m()}
    try:
        t = time.monotonic()
        res = stages.start_stage(sid, reg, wait_s=300, warm_up=warm)
        sample["start_to_running_s"] = round(time.monotonic() - t, 2)
        feed.start()
        _wait(lambda: len(_batches(res.deployment_id)) >= BATCHES_BEFORE, 300, f"{BATCHES_BEFORE} batches")
        before = _batches(res.deployment_id)
        steady = statistics.median(b.batch_duration_ms for b in before[3:BATCHES_BEFORE])
        sample.update(first_batch_ms=before[0].batch_duration_ms, steady_batch_ms=steady,
                      start_ratio=round(before[0].batch_duration_ms / steady, 2))

        rid = reconfigure.request(sid, "scale_out", cores=2, mechanism="live", reg=reg,
                                  requested_by="bench:first_batch")
        outcome = reconfigure.execute(rid, gate=quality.gate_new_run, reg=reg)
        ready = db.row("bench/reconfiguration", i=rid).executors_ready_at
        if outcome.status != "done" or ready is None:
            return {**sample, "live_status": outcome.status, "detail": outcome.detail}

        def after():
            return [b for b in _batches(res.deployment_id) if b.ts >= ready]
        _wait(lambda: len(after()) >= 1 + BATCHES_AFTER, 300, "batches after the scale-out")
        first, *rest = after()
        steady2 = statistics.median(b.batch_duration_ms for b in rest[:BATCHES_AFTER])
        sample.update(live_status="done", live_first_batch_ms=first.batch_duration_ms, live_steady_batch_ms=steady2,
                      live_ratio=round(first.batch_duration_ms / steady2, 2),
                      loadavg_1m_after=load_1m())
        say(f"  {'warm' if warm else 'cold'} start {i}: running in {sample['start_to_running_s']}s, first batch "
            f"{sample['first_batch_ms']} ms vs steady {steady:.0f} ms ({sample['start_ratio']}x); after the live "
            f"scale-out {first.batch_duration_ms} ms vs {steady2:.0f} ms ({sample['live_ratio']}x)")
        return sample
    finally:
        end_run(sid, reg, stop, feed, out.parent, "bench:first_batch", say, deadline_s=30)


def _summary(samples: list[dict], key: str) -> dict:
    return summary((s.get(key) for s in samples), 2, count="runs")


def run(runs: int, say: Callable[[str], None]) -> list[dict]:
    """`runs` cold and `runs` warm starts, alternating; a row per (event, warm-up) with medians."""
    samples = []
    for i in range(runs):
        for warm in (False, True):
            try:
                samples.append(one_run(i, warm, say))
            except Exception as e:  # noqa: BLE001 - a failed run is reported, the others still count
                say(f"[red]first-batch run {i} ({'warm' if warm else 'cold'}): {type(e).__name__}: {e}[/red]")
                samples.append({"run": i, "warm_up": warm, "error": f"{type(e).__name__}: {e}"})
    rows = []
    for warm in (False, True):
        mine = [s for s in samples if s["warm_up"] == warm]
        rows.append({"event": "start", "warm_up": warm, "ratio": _summary(mine, "start_ratio"),
                     "first_batch_ms": _summary(mine, "first_batch_ms"),
                     "steady_batch_ms": _summary(mine, "steady_batch_ms"),
                     "start_to_running_s": _summary(mine, "start_to_running_s"),
                     "loadavg_1m": _summary(mine, "loadavg_1m_before"), "target_ratio": 2.0, "samples": mine})
        rows.append({"event": "live_scale_out", "warm_up": warm, "ratio": _summary(mine, "live_ratio"),
                     "first_batch_ms": _summary(mine, "live_first_batch_ms"),
                     "steady_batch_ms": _summary(mine, "live_steady_batch_ms"),
                     "loadavg_1m": _summary(mine, "loadavg_1m_after"), "target_ratio": 2.0})
    for r in rows:
        r["meets_target"] = r["ratio"]["median"] is not None and r["ratio"]["median"] <= r["target_ratio"]
    return rows
