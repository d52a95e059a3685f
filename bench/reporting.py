"""Reporting views over one synthetic day: 10, 50 and 100 stages at a 1-second trigger.

For each size, a scratch database (`streamops_bench_reporting`) gets one day of stage_metrics
generated in SQL (sql/bench/reporting_fixture.sql: 86 400 × stages rows, apps of 10 stages),
then each reporting view is timed for that day (`SELECT * FROM reporting.<view> WHERE day = D`,
median of --runs). Writes bench/results/reporting.json and the EXPLAIN (ANALYZE, BUFFERS) of the
heaviest view's query at the largest size to bench/results/reporting_explain.txt.

    .venv/bin/python bench/reporting.py [--stages 10,50,100] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, date, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.harness import RESULTS, console, drop_database, load_1m, scratch_engine, table, write_result  # noqa: E402
from streamops.store import db  # noqa: E402

DAY = date(2025, 1, 15)
VIEWS = ("sla_daily", "downtime_daily", "cost_daily", "reconfigurations")


def generate(engine, stages: int, day: date = DAY) -> dict:
    t = time.perf_counter()
    with engine.begin() as conn:
        conn.execute(db.query("bench/metrics_partitions"), {"d": day})
        conn.execute(db.query("bench/reporting_fixture"), {"stages": stages, "day": day})
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(db.query("bench/vacuum_analyze"))
        rows = conn.execute(db.query("bench/metrics_of_day"), {"d": day}).scalar_one()
    return {"rows": rows, "generated_s": round(time.perf_counter() - t, 1)}


def backend_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) the server process `pid` has used, if it runs on this machine:
    on a shared machine wall time depends on the neighbours, CPU time much less. Only the
    session's own process: the parallel workers' share of a query is not in it."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def time_views(engine, runs: int, day: date = DAY) -> dict[str, dict]:
    """Median wall (and session-process CPU) time of `SELECT * FROM reporting.<view> WHERE day = D`, each in
    a fresh transaction."""
    out = {}
    for view in VIEWS:
        times, cpu, n = [], [], 0
        for _ in range(runs):
            with engine.connect() as conn:
                pid = conn.execute(db.query("bench/backend_pid")).scalar_one()
                c0, t = backend_cpu_s(pid), time.perf_counter()
                n = len(conn.execute(db.query(f"bench/view_{view}"), {"d": day}).all())
                times.append(time.perf_counter() - t)
                c1 = backend_cpu_s(pid)
                if c0 is not None and c1 is not None:
                    cpu.append(c1 - c0)
        out[view] = {"median_s": round(statistics.median(times), 3), "runs_s": [round(x, 3) for x in times],
                     "cpu_median_s": round(statistics.median(cpu), 3) if cpu else None,
                     "cpu_runs_s": [round(x, 3) for x in cpu], "rows": n,
                     "loadavg_1m": load_1m()}
    return out


def explain_heaviest(engine, view: str, day: date = DAY) -> list[str]:
    """The view's plan, then the plan of the per-day query inside it (auto_explain, nested)."""
    with engine.connect() as conn:
        lines = db.explain(f"bench/view_{view}", {"d": day}, conn)
        conn.execute(db.query("bench/auto_explain_on"))
        notices = conn.connection.dbapi_connection.notices  # psycopg2 keeps the server's notices
        del notices[:]
        conn.execute(db.query(f"bench/view_{view}"), {"d": day}).all()
        nested = [n for n in notices if "stage_metrics m" in n]
        conn.rollback()
    return lines + ["", "-- the per-day function's query, as it ran inside the view (auto_explain):"] + \
        "\n".join(nested).splitlines()


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stages", default="10,50,100", help="comma-separated stage counts")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--keep", action="store_true", help="keep the scratch database")
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.stages.split(",")]

    results, explain = [], []
    for stages in sizes:
        engine, admin = scratch_engine("streamops_bench_reporting")
        with console.status(f"generating one day of {stages} stages at 1 s …"):
            gen = generate(engine, stages)
        console.print(f"{stages} stages: {gen['rows']:,} stage_metrics rows in {gen['generated_s']}s")
        views = time_views(engine, args.runs)
        for v, r in views.items():
            console.print(f"  reporting.{v}: {r['median_s'] * 1000:,.0f} ms (median of {args.runs}: {r['runs_s']}; "
                          f"session CPU without parallel workers {r['cpu_runs_s']} s; load {r['loadavg_1m']})")
        results.append({"stages": stages, **gen, "views": views,
                        "total_median_s": round(sum(r["median_s"] for r in views.values()), 3)})
        if stages == max(sizes):
            heaviest = max(views, key=lambda v: views[v]["median_s"])
            explain = [f"-- EXPLAIN (ANALYZE, BUFFERS) SELECT * FROM reporting.{heaviest} WHERE day = '{DAY}'; "
                       f"{stages} stages, {gen['rows']:,} rows"] + explain_heaviest(engine, heaviest)
        engine.dispose()
        if not args.keep:
            drop_database(admin, "streamops_bench_reporting")

    result = {"benchmark": "reporting_views", "day": DAY.isoformat(), "trigger_s": 1, "runs": args.runs,
              "sizes": results, "limit_s": 10.0, "cpus": os.cpu_count(),
              "measured_at": datetime.now(UTC).replace(microsecond=0).isoformat()}
    write_result("reporting.json", result, args)
    if explain:
        (RESULTS / "reporting_explain.txt").write_text("\n".join(explain) + "\n")
    console.print(table(f"reporting views for one day at 1 s batches (median of {args.runs})",
                        ("stages", "rows", *VIEWS, "all"),
                        [[str(r["stages"]), f"{r['rows']:,}",
                          *(f"{r['views'][v]['median_s'] * 1000:,.0f} ms" for v in VIEWS),
                          f"{r['total_median_s'] * 1000:,.0f} ms"] for r in results]))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
