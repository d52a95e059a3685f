"""One control cycle (Operator + Application Managers) over 10 000 stages.

1 000 apps × 10 stages with their metrics already in PostgreSQL (sql/bench/scale_fixture.sql,
generated with generate_series in a scratch database), then `control.replan()` for every app
at once, several times; reports the median and the plan of the window query.

    .venv/bin/python bench/scale.py [--apps 1000] [--stages-per-app 10] [--trigger-s 5] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.harness import console, scratch_engine, shown, table, write_result  # noqa: E402
from streamops import control  # noqa: E402
from streamops.store import db  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--apps", type=int, default=1000)
    p.add_argument("--stages-per-app", type=int, default=10)
    p.add_argument("--trigger-s", type=int, default=5, help="seconds between a stage's batches")
    p.add_argument("--history-s", type=int, default=600, help="seconds of metrics per stage already stored")
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args(argv)

    engine, _ = scratch_engine("streamops_bench_scale")
    now = datetime.now(UTC).replace(microsecond=0)
    stages = args.apps * args.stages_per_app
    with console.status(f"generating {stages:,} stages × {args.history_s // args.trigger_s} batches …"):
        t = time.perf_counter()
        with engine.begin() as conn:
            conn.execute(db.query("bench/scale_fixture"), {
                "apps": args.apps, "stages_per_app": args.stages_per_app, "trigger_s": args.trigger_s,
                "history_s": args.history_s, "now": now,
            })
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(db.query("bench/vacuum_analyze"))
            rows = conn.execute(db.query("bench/metrics_count")).scalar_one()
        generated_s = time.perf_counter() - t
    console.print(f"{rows:,} stage_metrics rows for {stages:,} stages generated in {generated_s:.1f}s")

    runs = []
    for i in range(args.runs):
        report = control.replan(now=now, host=(0.4, 0.4), decided_by="bench")
        runs.append(report.seconds)
        decided = sum(len(a.decisions) for a in report.apps)
        console.print(f"run {i + 1}: {report.seconds['total_s'] * 1000:.0f} ms "
                      f"({report.stages_analyzed:,} windows, {len(report.requests):,} requests, {decided:,} decisions)")

    with engine.begin() as conn:
        floor = conn.execute(db.query("window_floor"), {"now": now, "window_s": 120.0, "app": None}).scalar_one()
        conn.execute(db.query("windows_tuning"))  # as control.load_windows does
        plan = db.explain("stage_windows", {
            "now": now, "floor": floor, "window_s": 120.0, "stab_s": 60.0, "app": None, "stage": None,
        }, conn)

    median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    result = {
        "benchmark": "control_cycle_scale", "stages": stages, "apps": args.apps, "trigger_s": args.trigger_s,
        "metrics_rows": rows, "window_rows": stages * int(120 / args.trigger_s), "runs": runs,
        "median_s": median, "explain_analyze": plan, "measured_at": now.isoformat(),
    }
    out = write_result(f"scale_{stages}_t{args.trigger_s}.json", result, args)
    parts = ("windows_s", "operators_s", "applications_s", "total_s")
    console.print(table(f"control cycle over {stages:,} stages ({args.trigger_s}s batches, median of {args.runs})",
                        ("window query", "operators", "applications", "total"),
                        [[f"{median[k] * 1000:.0f} ms" for k in parts]]))
    console.print(f"plan: {plan[-2].strip()} / {plan[-1].strip()}  (full EXPLAIN ANALYZE in {shown(out)})")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
