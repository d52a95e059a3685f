"""What `synchronous_commit` costs and what it keeps (docs/ha.md, "Durability of the database").

Cost: `--inserts` autocommitted single-row inserts into a scratch table, one session, with the
session's synchronous_commit `on` then `off`, alternating, `--runs` times each; the median wall
time of each. Every commit is its own transaction, as a heartbeat or a run's ledger write is.

Loss (`--crashes N`): rows inserted as fast as one session can, each commit acknowledged, while
another backend of the server is SIGKILLed: PostgreSQL then ends every session and recovers
from the WAL on disk. The rows acknowledged but missing after the recovery are commits lost.
The kill restarts the whole server (every session of it ends): run it on a server of your own.

Scratch database `streamops_bench_commit_<pid>` on the server of `streamops db up`, dropped at
the end.

    .venv/bin/python bench/synchronous_commit.py [--inserts 2000] [--runs 3] [--crashes 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import sys
import threading
import time

import psycopg2

from bench.scratch import drop_database, scratch_database
from streamops.store import db
from streamops.waiting import wait_until


def _sql(name: str) -> str:
    return db.query_path(f"bench/{name}").read_text()


def _session(url: str, sync: str):
    conn = db.writer_connection(url)
    conn.autocommit = True  # each insert its own transaction, acknowledged by its commit
    with conn.cursor() as cur:
        cur.execute(_sql("synchronous_commit_set"), {"value": sync})
    return conn


def timed_inserts(url: str, sync: str, n: int) -> float:
    """Seconds for `n` autocommitted inserts with synchronous_commit = `sync`."""
    conn = _session(url, sync)
    try:
        with conn.cursor() as cur:
            cur.execute(_sql("commit_scratch_clear"))
            insert = _sql("commit_scratch_insert")
            started = time.perf_counter()
            for i in range(1, n + 1):
                cur.execute(insert, {"id": i})
            return time.perf_counter() - started
    finally:
        conn.close()


def _accepting(url: str) -> bool:
    try:
        db.writer_connection(url).close()
        return True
    except psycopg2.OperationalError:
        return False


def crash_loss(url: str, sync: str, kill_after_s: float) -> tuple[int, int]:
    """(commits acknowledged, of them missing after the server's crash recovery)."""
    conn = _session(url, sync)
    with conn.cursor() as cur:
        cur.execute(_sql("commit_scratch_clear"))
    victim = db.writer_connection(url)  # an idle backend: its death is the server's crash
    with victim.cursor() as cur:
        cur.execute(db.query_path("bench/backend_pid").read_text())
        pid = cur.fetchone()[0]
    threading.Timer(kill_after_s, os.kill, (pid, signal.SIGKILL)).start()
    acked = 0
    insert = _sql("commit_scratch_insert")
    try:
        with conn.cursor() as cur:
            while True:
                cur.execute(insert, {"id": acked + 1})
                acked += 1  # the commit returned: the server said the row is committed
    except psycopg2.Error:
        pass
    for c in (conn, victim):
        with contextlib.suppress(psycopg2.Error):
            c.close()
    if not wait_until(lambda: _accepting(url), 60, interval_s=0.2):
        raise RuntimeError("the server did not come back within 60 s of the crash")
    check = db.writer_connection(url)
    try:
        with check.cursor() as cur:
            cur.execute(_sql("commit_scratch_kept"))
            kept, top = cur.fetchone()
    finally:
        check.close()
    assert kept == top, "commits are kept in order: no gap"
    return acked, max(0, acked - kept)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--inserts", type=int, default=2000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--crashes", type=int, default=0, help="crash the server N times per setting (restarts it)")
    args = p.parse_args(argv)
    name = f"streamops_bench_commit_{os.getpid()}"
    url, server = scratch_database(name)
    try:
        with db.writer_connection(url) as conn, conn.cursor() as cur:
            cur.execute(_sql("commit_scratch_table"))
            cur.execute(db.query_path("synchronous_commit").read_text())
            print(f"server default synchronous_commit = {cur.fetchone()[0]}")
        took: dict[str, list[float]] = {"on": [], "off": []}
        for _ in range(args.runs):  # alternating, so a busy neighbour hits both alike
            for sync in took:
                took[sync].append(timed_inserts(url, sync, args.inserts))
        for sync, runs in took.items():
            med = statistics.median(runs)
            print(f"synchronous_commit={sync:3}: {args.inserts} inserts, median {med:.3f} s "
                  f"({1000 * med / args.inserts:.3f} ms a commit, {args.inserts / med:,.0f}/s); "
                  f"runs {', '.join(f'{r:.3f}' for r in runs)} s")
        for i in range(args.crashes):
            for sync in ("off", "on"):
                acked, lost = crash_loss(url, sync, kill_after_s=1.0 + 0.37 * i)
                print(f"crash {i + 1}, synchronous_commit={sync:3}: {acked} commits acknowledged, {lost} lost")
    finally:
        drop_database(server, name)


if __name__ == "__main__":
    main(sys.argv[1:])
