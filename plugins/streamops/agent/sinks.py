"""Idempotent sinks, written from `foreachBatch`.

Both sinks are keyed by the workload's deterministic output key, so a replayed batch (after a
crash, a restart from a pre-staged checkpoint, or a second replica) never adds a row. Each
commit is recorded in `sink_commits`; the downtime ledger reads the gaps between commits.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from streamops.agent.metrics import SinkStats, latency_from_event_times
from streamops.store import db

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

WRITE_PAGE = 2000


def _chunks(rows: Iterable, size: int) -> Iterator[list]:
    chunk = []
    for r in rows:
        chunk.append(r)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _execute_values_partition(url: str, sql: str, template: str | None, to_tuple: Callable,
                              conflict_key: Callable) -> Callable:
    """A foreachPartition function: one connection per partition, pages of `execute_values`.
    Runs in the executors' Python workers, so it carries only picklable strings.

    Rows are written in `conflict_key` order: every writer (the partitions of a batch, and a
    primary and its active backup writing the same keys) then takes row locks in one global
    order, so concurrent upserts wait for each other but never deadlock."""

    def write(rows: Iterable) -> None:
        import psycopg2
        from psycopg2.extras import execute_values

        tuples = sorted((to_tuple(r) for r in rows), key=conflict_key)
        conn = psycopg2.connect(url)
        try:
            with conn, conn.cursor() as cur:
                for chunk in _chunks(tuples, WRITE_PAGE):
                    execute_values(cur, sql, chunk, template=template, page_size=WRITE_PAGE)
        finally:
            conn.close()

    return write


def _utc(ts: datetime | None) -> datetime | None:
    # The driver runs with spark.sql.session.timeZone=UTC, so naive timestamps are UTC.
    return ts.replace(tzinfo=timezone.utc) if ts is not None and ts.tzinfo is None else ts


def _event_time_stats(df: DataFrame) -> tuple[int, float | None, float | None, float | None]:
    from pyspark.sql import functions as F

    ms = F.unix_millis("event_ts")
    r = df.agg(
        F.count(F.lit(1)).alias("n"),
        F.percentile_approx(ms, [0.05, 0.5], 1000).alias("q"),
        F.min(ms).alias("lo"),
    ).first()
    q = r["q"] or [None, None]
    return int(r["n"]), q[0], q[1], r["lo"]


# Text of psycopg2/libpq errors that mean "the database is away", or that PostgreSQL rolled the
# transaction back and a retry will do (deadlock, serialization), as seen through Spark's Python
# worker tracebacks (the exception type does not survive the trip through the JVM).
_TRANSIENT = ("OperationalError", "could not connect", "server closed the connection",
              "Connection refused", "the database system is", "terminating connection",
              "deadlock detected", "could not serialize access")


def is_transient(e: BaseException) -> bool:
    return any(marker in str(e) for marker in _TRANSIENT)


def retry_idempotent(action: Callable[[], None], what: str, budget_s: float = 300.0,
                     abort: threading.Event | None = None) -> None:
    """Retry an idempotent write with backoff while the database is away: a database restart
    delays the batch (backpressure) instead of failing the stage. Other errors fail at once,
    and so does every error once `abort` is set (a stop must not wait out the retry budget)."""
    deadline, backoff = time.monotonic() + budget_s, 1.0
    while True:
        try:
            action()
            return
        except Exception as e:
            if not is_transient(e) or time.monotonic() + backoff > deadline or (abort and abort.is_set()):
                raise
            first = next((line for line in str(e).splitlines() if "Error" in line), str(e)[:200])
            log.warning("%s failed, retrying in %.0fs: %s", what, backoff, first.strip())
            if abort is not None:
                abort.wait(backoff)
            else:
                time.sleep(backoff)
            backoff = min(backoff * 2, 30)


class BatchSink:
    """Shared frame: measure event times, write idempotently, record the commit."""

    def __init__(self, stage_id: str, deployment_id: int | None, on_commit: Callable[[SinkStats], None] | None = None,
                 abort: threading.Event | None = None):
        self.stage_id = stage_id
        self.deployment_id = deployment_id
        self.on_commit = on_commit
        self.abort = abort
        self.url = db.libpq_url(db.database_url())

    def write(self, df: DataFrame, batch_id: int) -> None:  # subclasses
        raise NotImplementedError

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        df = df.persist()
        try:
            n, p05, p50, lo = _event_time_stats(df)
            if n:
                retry_idempotent(lambda: self.write(df, batch_id), f"stage {self.stage_id}: batch {batch_id} sink write",
                                 abort=self.abort)
        finally:
            df.unpersist()
        committed = datetime.now(timezone.utc)
        p50_ms, p95_ms, max_ms = latency_from_event_times(committed.timestamp() * 1000, p05, p50, lo)
        stats = SinkStats(batch_id, n, committed, p50_ms, p95_ms, max_ms)
        with db.engine().begin() as conn:
            conn.execute(db.query("sink_commit"), {
                "stage_id": self.stage_id, "deployment_id": self.deployment_id or 0,
                "batch_id": batch_id, "rows": n, "committed_at": committed,
            })
        if self.on_commit:
            self.on_commit(stats)


class PostgresUpsertSink(BatchSink):
    """`sink_outputs`, upserted from the executors; the newest `version` per key wins (ties: the last write)."""

    def write(self, df: DataFrame, batch_id: int) -> None:
        stage_id = self.stage_id
        sql = db.query("sink_upsert").text
        fn = _execute_values_partition(
            self.url, sql, "(%s, %s, %s::jsonb, %s, %s, %s)",
            lambda r: (stage_id, r["key"], r["value"], _utc(r["event_ts"]), r["version"], batch_id),
            conflict_key=lambda t: t[1],
        )
        df.select("key", "value", "event_ts", "version").foreachPartition(fn)


class ParquetSink(BatchSink):
    """One directory per batch id, overwritten on replay: the same batch always holds the same rows."""

    def __init__(self, path: str, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.path = path

    def write(self, df: DataFrame, batch_id: int) -> None:
        df.write.mode("overwrite").parquet(f"{self.path}/batch_id={batch_id}")


class QuarantineSink:
    """Malformed records → `quarantine` with the raw text and the reason. Never fails the stage
    for a bad record; a replayed batch adds nothing (keyed by file and raw text)."""

    def __init__(self, stage_id: str, deployment_id: int | None, abort: threading.Event | None = None):
        self.stage_id = stage_id
        self.deployment_id = deployment_id
        self.abort = abort
        self.url = db.libpq_url(db.database_url())

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        stage_id, dep = self.stage_id, self.deployment_id
        keyed = df.select(
            "source_file", "raw", "reason",
            F.md5(F.concat_ws("\n", F.coalesce("source_file", F.lit("")), "raw")).alias("record_key"),
        )
        fn = _execute_values_partition(
            self.url, db.query("quarantine_insert").text, None,
            lambda r: (stage_id, dep, batch_id, r["source_file"], r["record_key"], r["raw"], r["reason"]),
            conflict_key=lambda t: t[4],
        )
        started = time.monotonic()
        retry_idempotent(lambda: keyed.foreachPartition(fn), f"stage {stage_id}: quarantine batch {batch_id}",
                         abort=self.abort)
        log.debug("stage %s: quarantine batch %d written in %.0f ms", stage_id, batch_id, (time.monotonic() - started) * 1000)
