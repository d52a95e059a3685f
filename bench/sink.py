"""The PostgreSQL sink's database cost per batch: the old direct upsert against staging + apply.

No Spark: the rows are built in Python and written with psycopg2 as the executors and the driver
write them. For each batch size, two fresh stage ids get the same keys (`k000001`…) and the same
batches, version = batch number, so the first batch inserts every key and each later one updates
every key:
  direct  `execute_values` of the old upsert into sink_outputs, pages of sinks.WRITE_PAGE, one
          transaction (what each partition did before sql/schema/023_sink_staging.sql);
  staged  `execute_values` of sql/queries/sink_stage.sql, pages of sinks.WRITE_PAGE, one
          transaction; then sql/queries/sink_apply.sql in a second one.
Wall time per batch; the first batch (the inserts) is the warm-up, the median is over the next
--batches (updates). The two paths alternate batch by batch, so a busy neighbour hits both alike.

Scratch database `streamops_bench_sink_<pid>` on the server of `streamops db up`, migrated, dropped
at the end. Writes bench/results/sink.json.

    .venv/bin/python bench/sink.py [--sizes 2000,20000,100000] [--batches 5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.harness import drop_database, load_1m, scratch_engine, table, write_result  # noqa: E402
from streamops.agent import sinks  # noqa: E402
from streamops.store import db  # noqa: E402

console = Console(width=130)

DIRECT_TEMPLATE = "(%s, %s, %s::jsonb, %s, %s, %s)"
STAGE_TEMPLATE = "(%s, %s, %s, %s, %s::jsonb, %s, %s)"  # as PostgresUpsertSink.stage
DEPLOYMENT = 1
T0 = datetime(2025, 1, 15, tzinfo=UTC)


def psycopg2_sql(sql: str) -> str:
    """`:name` (SQLAlchemy) → `%(name)s` (psycopg2), leaving `::type` casts alone."""
    return re.sub(r"(?<![:\w]):(\w+)", r"%(\1)s", sql.replace("%", "%%"))


def rows_for(size: int, batch: int) -> list[tuple]:
    """(key, value, event_ts, version) in key order, as the sink writes them."""
    ts = T0 + timedelta(seconds=batch)
    return [(f"k{i:06d}", json.dumps({"count": i + batch}), ts, float(batch)) for i in range(1, size + 1)]


def direct(conn, stage_id: str, batch: int, rows: list[tuple]) -> float:
    from psycopg2.extras import execute_values

    tuples = [(stage_id, k, v, ts, ver, batch) for k, v, ts, ver in rows]
    t = time.perf_counter()
    with conn, conn.cursor() as cur:
        for chunk in sinks._chunks(tuples, sinks.WRITE_PAGE):
            execute_values(cur, db.query("bench/sink_direct_upsert").text, chunk, template=DIRECT_TEMPLATE,
                           page_size=sinks.WRITE_PAGE)
    return time.perf_counter() - t


def staged(conn, stage_id: str, batch: int, rows: list[tuple], apply_sql: str) -> tuple[float, float]:
    """(stage seconds, apply seconds); the apply must find and apply every staged row."""
    from psycopg2.extras import execute_values

    tuples = [(stage_id, DEPLOYMENT, batch, k, v, ts, ver) for k, v, ts, ver in rows]
    t = time.perf_counter()
    with conn, conn.cursor() as cur:
        for chunk in sinks._chunks(tuples, sinks.WRITE_PAGE):
            execute_values(cur, db.query("sink_stage").text, chunk, template=STAGE_TEMPLATE,
                           page_size=sinks.WRITE_PAGE)
    t_stage = time.perf_counter() - t
    t = time.perf_counter()
    with conn, conn.cursor() as cur:
        cur.execute(apply_sql, {"stage_id": stage_id, "deployment_id": DEPLOYMENT, "batch_id": batch})
        got_staged, applied = cur.fetchone()
    t_apply = time.perf_counter() - t
    if got_staged != len(rows) or applied != len(rows):
        raise RuntimeError(f"{stage_id} batch {batch}: staged {got_staged}, applied {applied}, wanted {len(rows)}")
    return t_stage, t_apply


def same_output(conn, a: str, b: str) -> bool:
    """Both stage ids hold the same keys, values and versions."""
    with conn, conn.cursor() as cur:
        cur.execute(psycopg2_sql(db.query("bench/sink_same_output").text), {"a": a, "b": b})
        return cur.fetchone()[0] == 0


def run_size(conn, size: int, batches: int, apply_sql: str) -> dict:
    sid_d, sid_s = f"bench.sink{size}.direct", f"bench.sink{size}.staged"
    d_s, st_s, ap_s = [], [], []
    for batch in range(batches + 1):
        rows = rows_for(size, batch)
        # Alternate which path goes first: the second one finds the server's caches warmer.
        if batch % 2:
            t_st, t_ap = staged(conn, sid_s, batch, rows, apply_sql)
            t_d = direct(conn, sid_d, batch, rows)
        else:
            t_d = direct(conn, sid_d, batch, rows)
            t_st, t_ap = staged(conn, sid_s, batch, rows, apply_sql)
        d_s.append(t_d)
        st_s.append(t_st)
        ap_s.append(t_ap)
        console.print(f"  {size:,} rows, batch {batch}{' (inserts, warm-up)' if batch == 0 else ''}: "
                      f"direct {t_d * 1000:,.0f} ms, staged {t_st * 1000:,.0f} + apply {t_ap * 1000:,.0f} ms")
    if not same_output(conn, sid_d, sid_s):
        raise RuntimeError(f"{size} rows: the direct and the staged stage ids differ")
    total = [a + b for a, b in zip(st_s[1:], ap_s[1:], strict=True)]
    med = {"direct_s": statistics.median(d_s[1:]), "stage_s": statistics.median(st_s[1:]),
           "apply_s": statistics.median(ap_s[1:]), "staged_s": statistics.median(total)}
    return {"rows": size, "median": {k: round(v, 4) for k, v in med.items()},
            "ratio_staged_direct": round(med["staged_s"] / med["direct_s"], 2),
            "insert_batch": {"direct_s": round(d_s[0], 4), "stage_s": round(st_s[0], 4), "apply_s": round(ap_s[0], 4)},
            "updates_s": {"direct": [round(x, 4) for x in d_s[1:]], "stage": [round(x, 4) for x in st_s[1:]],
                          "apply": [round(x, 4) for x in ap_s[1:]]},
            "loadavg_1m": load_1m()}


def _row(r: dict) -> list[str]:
    m, ins = r["median"], r["insert_batch"]
    return [f"{r['rows']:,}", f"{m['direct_s'] * 1000:,.0f} ms", f"{m['stage_s'] * 1000:,.0f} ms",
            f"{m['apply_s'] * 1000:,.0f} ms", f"{m['staged_s'] * 1000:,.0f} ms",
            f"{r['ratio_staged_direct']:.2f}", f"{ins['direct_s'] * 1000:,.0f} ms",
            f"{(ins['stage_s'] + ins['apply_s']) * 1000:,.0f} ms"]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="2000,20000,100000", help="comma-separated rows per batch")
    p.add_argument("--batches", type=int, default=5, help="measured update batches per size, after one warm-up")
    p.add_argument("--keep", action="store_true", help="keep the scratch database")
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]

    name = f"streamops_bench_sink_{os.getpid()}"
    engine, admin = scratch_engine(name)
    results = []
    try:
        engine.dispose()
        apply_sql = psycopg2_sql(db.query("sink_apply").text)
        # One connection for both paths: connecting is the same cost either way, and not the database's.
        conn = db.writer_connection(os.environ["STREAMOPS_DATABASE_URL"])
        try:
            for size in sizes:
                results.append(run_size(conn, size, args.batches, apply_sql))
        finally:
            conn.close()
    finally:
        db.engine().dispose()
        if not args.keep:
            drop_database(admin, name)

    result = {"benchmark": "sink_staging", "page_rows": sinks.WRITE_PAGE, "batches": args.batches,
              "sizes": results, "cpus": os.cpu_count(),
              "measured_at": datetime.now(UTC).replace(microsecond=0).isoformat()}
    write_result("sink.json", result, args)
    console.print(table(f"sink write per batch, direct upsert vs staged + apply (median of {args.batches} update "
                        "batches)", ("rows", "direct", "stage", "apply", "staged (stage + apply)", "staged/direct",
                                     "insert batch: direct", "insert batch: staged"), map(_row, results)))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
