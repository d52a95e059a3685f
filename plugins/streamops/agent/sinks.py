"""Idempotent sinks, written from `foreachBatch`.

Both sinks are keyed by the job's deterministic output key (sink.key), so a replayed batch (after a
crash, a restart from a pre-staged checkpoint, or a second replica) never adds a row. Each
commit is recorded in `sink_commits`; the downtime ledger reads the gaps between commits.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from streamops.agent import dir_swap
from streamops.agent.errors import TransientError, is_transient, tag_sqlstate
from streamops.agent.fencing import exit_fenced, fence
from streamops.agent.metrics import SinkStats, latency_from_event_times
from streamops.store import db

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from sqlalchemy import Connection
    from tenacity import RetryCallState

log = logging.getLogger(__name__)

WRITE_PAGE = 2000
PAGE_BYTES = 8 << 20


def _chunks(rows: Iterable[Any], size: int, weigh: Callable[[Any], int] | None = None,
            max_bytes: int = PAGE_BYTES) -> Iterator[list[Any]]:
    """Pages of at most `size` rows and, when `weigh` is given, about `max_bytes` (one
    statement must not hold a thousand 5 MB quarantined lines)."""
    chunk, held = [], 0
    for r in rows:
        chunk.append(r)
        held += weigh(r) if weigh else 0
        if len(chunk) >= size or held >= max_bytes:
            yield chunk
            chunk, held = [], 0
    if chunk:
        yield chunk


# -- text PostgreSQL accepts ---------------------------------------------------------------------
# psycopg2 refuses a NUL character in any string, UTF-8 cannot encode a lone surrogate, and jsonb
# refuses the escape \u0000. The parser quarantines records holding them (streamops.records);
# these are the sinks' own guard, so no value can ever fail a batch.

@overload
def pg_text(s: str) -> str: ...


@overload
def pg_text(s: None) -> None: ...


def pg_text(s: str | None) -> str | None:
    if s is None:
        return None
    if "\x00" in s:
        s = s.replace("\x00", "\ufffd")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        s = s.encode("utf-8", "replace").decode("utf-8")
    return s


# A btree entry holds about 2 700 bytes, so a longer output key (a 100 kB "word") could never be
# written: such keys are cut and made unique again by a hash of the whole key.
KEY_MAX_BYTES = 1024


def pg_key(s: str) -> str:
    s = pg_text(s)
    b = s.encode("utf-8")
    if len(b) <= KEY_MAX_BYTES:
        return s
    return b[: KEY_MAX_BYTES - 40].decode("utf-8", "ignore") + "…#" + hashlib.md5(b).hexdigest()


def _scrub(v: Any) -> Any:
    if isinstance(v, str):
        return pg_text(v)
    if isinstance(v, list):
        return [_scrub(x) for x in v]
    if isinstance(v, dict):
        return {pg_text(k): _scrub(x) for k, x in v.items()}
    return v


def pg_json(s: str | None) -> str | None:
    if s is None or "\\u0000" not in s:
        return pg_text(s)
    return json.dumps(_scrub(json.loads(s)), ensure_ascii=False)


def record_key(source_file: str | None, raw: bytes, occurrence: int = 1) -> str:
    """A quarantined line's identity: md5 of its file and exact bytes, and which of the equal
    lines of that file it is (so two equal bad lines are two rows, and a replay adds none).
    The same as `QuarantineSink`'s key computed in Spark."""
    base = hashlib.md5((source_file or "").encode("utf-8") + b"\n" + bytes(raw)).hexdigest()
    return base if occurrence <= 1 else f"{base}:{occurrence}"


def quarantine_values(stage_id: str, deployment_id: int | None, batch_id: int, source_file: str | None,
                      raw: bytes, key: str, kind: str, reason: str) -> tuple[Any, ...]:
    """One `quarantine_insert` row: the line as text, and its exact bytes when the text is not."""
    raw = bytes(raw)
    text = pg_text(raw.decode("utf-8", "replace"))
    exact = None if text.encode("utf-8") == raw else raw
    return (stage_id, deployment_id, batch_id, source_file, key, text, exact, len(raw), kind, pg_text(reason))


def newest_per_key(tuples: list[tuple[Any, ...]], key: Callable[[tuple[Any, ...]], Any],
                   version: Callable[[tuple[Any, ...]], Any]) -> list[tuple[Any, ...]]:
    """One row per key, the highest version (ties: the later row), in key order. An upsert
    statement may not touch a row twice, so two records with one id in a batch (a producer's
    resend) would otherwise fail the batch on every replay."""
    ordered = sorted(tuples, key=lambda t: (key(t), version(t)))  # stable: ties keep input order
    return [t for i, t in enumerate(ordered) if i + 1 == len(ordered) or key(ordered[i + 1]) != key(t)]


def _execute_values_partition(url: str, sql: str, template: str | None, to_tuple: Callable[..., Any],
                              conflict_key: Callable[..., Any], weigh: Callable[..., int] | None = None,
                              version: Callable[..., Any] | None = None,
                              written: Any = None) -> Callable[[Iterable[Any]], None]:
    """A foreachPartition function: one connection per partition, pages of `execute_values`.
    Runs in the executors' Python workers, so it carries only picklable strings.

    Rows are written in `conflict_key` order: every writer (the partitions of a batch, and a
    primary and its active backup writing the same keys) then takes row locks in one global
    order, so concurrent upserts wait for each other but never deadlock."""

    def write(rows: Iterable[Any]) -> None:
        import psycopg2
        from psycopg2.extras import execute_values

        tuples = [to_tuple(r) for r in rows]
        tuples = newest_per_key(tuples, conflict_key, version) if version else sorted(tuples, key=conflict_key)
        try:
            conn = db.writer_connection(url)
            try:
                with conn, conn.cursor() as cur:
                    for chunk in _chunks(tuples, WRITE_PAGE, weigh):
                        execute_values(cur, sql, chunk, template=template, page_size=WRITE_PAGE)
            finally:
                conn.close()
            if written is not None:  # an accumulator: Spark counts a successful task's update once
                written.add(len(tuples))
        except psycopg2.Error as e:  # only text crosses the JVM: keep the SQLSTATE in it for the driver
            raise RuntimeError(tag_sqlstate(e)) from e

    return write


def _utc(ts: datetime | None) -> datetime | None:
    # The driver runs with spark.sql.session.timeZone=UTC, so naive timestamps are UTC.
    return ts.replace(tzinfo=UTC) if ts is not None and ts.tzinfo is None else ts


def _event_time_stats(df: DataFrame) -> tuple[int, float | None, float | None, float | None]:
    from pyspark.sql import functions as F

    ms = F.unix_millis("event_ts")
    r = df.agg(
        F.count(F.lit(1)).alias("n"),
        F.percentile_approx(ms, [0.05, 0.5], 1000).alias("q"),
        F.min(ms).alias("lo"),
    ).first()
    assert r is not None  # an aggregate without grouping has one row
    q = r["q"] or [None, None]
    return int(r["n"]), q[0], q[1], r["lo"]


def retry_idempotent(action: Callable[[], Any], what: str, budget_s: float = 300.0,
                     abort: threading.Event | None = None) -> Any:
    """Retry an idempotent write with backoff while the database is away: a database restart
    delays the batch (backpressure) instead of failing the stage. Other errors fail at once,
    and so does every error once `abort` is set (a stop must not wait out the retry budget).
    Returns what `action` returns."""
    from tenacity import (
        Retrying,
        retry_if_exception,
        stop_before_delay,
        stop_never,
        stop_when_event_set,
        wait_exponential,
    )

    def attempt() -> Any:
        db.check_outage()  # an injected outage reaches the executors' writes through here
        return action()

    def sleep(seconds: float) -> None:  # an abort ends the wait early
        if abort is not None:
            abort.wait(seconds)
        else:
            time.sleep(seconds)

    def warn(state: RetryCallState) -> None:
        e = state.outcome.exception() if state.outcome is not None else None  # set before a sleep
        first = next((line for line in str(e).splitlines() if "Error" in line), str(e)[:200])
        log.warning("%s failed, retrying in %.0fs: %s", what, state.upcoming_sleep, first.strip())

    return Retrying(
        retry=retry_if_exception(is_transient),
        # 1, 2, 4, then 5 s: a database back after 30 s is used within 5 s, not 30
        wait=wait_exponential(multiplier=1, max=5),
        stop=stop_before_delay(budget_s) | (stop_when_event_set(abort) if abort is not None else stop_never),
        sleep=sleep,
        before_sleep=warn, reraise=True,
    )(attempt)


class BatchSink:
    """Shared frame: measure event times, write idempotently, record the commit."""

    def __init__(self, stage_id: str, deployment_id: int | None, on_commit: Callable[[SinkStats], None] | None = None,
                 abort: threading.Event | None = None):
        self.stage_id = stage_id
        self.deployment_id = deployment_id
        self.on_commit = on_commit
        self.abort = abort
        self.url = db.writer_dsn()

    def write(self, df: DataFrame, batch_id: int) -> None:  # subclasses
        raise NotImplementedError

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        fence(self.stage_id, self.deployment_id, f"batch {batch_id}")
        df = df.persist()
        try:
            n, p05, p50, lo = _event_time_stats(df)
            committed = retry_idempotent(lambda: self.write_and_commit(df, batch_id, n),
                                         f"stage {self.stage_id}: batch {batch_id} sink write", abort=self.abort)
        finally:
            df.unpersist()
        if committed is None:
            exit_fenced(self.stage_id, self.deployment_id, f"the commit of batch {batch_id}")
        p50_ms, p95_ms, max_ms = latency_from_event_times(committed.timestamp() * 1000, p05, p50, lo)
        stats = SinkStats(batch_id, n, committed, p50_ms, p95_ms, max_ms)
        if self.on_commit:
            self.on_commit(stats)

    def write_and_commit(self, df: DataFrame, batch_id: int, n: int) -> datetime | None:
        """Write the batch's `n` rows, then its `sink_commits` row: the commit time (the database's
        clock), or None when the run is fenced (a newer run of its stage and role was admitted)."""
        if n:
            self.write(df, batch_id)
        with db.transaction() as conn:
            return self._commit(conn, batch_id, n)

    def _commit(self, conn: Connection, batch_id: int, n: int) -> datetime | None:
        """The batch's `sink_commits` row, in `conn`'s transaction: its time by the database's clock
        (sink_commit.sql), not this driver's, which may be off; None when the run is fenced.
        The run's row is locked first, so an admission of a newer run waits for this commit or
        is seen by its check (sink_commit_lock.sql); the check is the next statement, so it reads
        after the lock was granted."""
        if self.deployment_id:
            conn.execute(db.query("sink_commit_lock"), {"deployment_id": self.deployment_id})
        row = conn.execute(db.query("sink_commit"), {
            "stage_id": self.stage_id, "deployment_id": self.deployment_id or 0, "batch_id": batch_id,
            "rows": n}).first()
        return None if row is None else row.committed_at


class _Fenced(Exception):
    """Raised inside the apply's transaction to roll it back."""


class PostgresUpsertSink(BatchSink):
    """`sink_outputs`; the newest `version` per key wins (ties: the last write). Atomic per batch:
    the executors stage the batch's rows (`sink_staging`), and the driver applies them in the
    transaction that writes the batch's commit, so a batch that fails half-way leaves nothing
    behind, and a fenced run's batch is rolled back whole."""

    DRY_RUN_BATCH = -1  # staged by `dry_run` only: no batch of a query has a negative id

    def write_and_commit(self, df: DataFrame, batch_id: int, n: int) -> datetime | None:
        return self.apply_and_commit(batch_id, n, self.stage(df, batch_id) if n else 0)

    def stage(self, df: DataFrame, batch_id: int) -> int:
        """Stage the batch's rows from the executors (after clearing an earlier try's); the rows staged."""
        stage_id, dep = self.stage_id, self.deployment_id or 0
        with db.transaction() as conn:
            conn.execute(db.query("sink_staged_clear"), {"stage_id": stage_id, "deployment_id": dep,
                                                         "batch_id": batch_id})
        acc = df.sparkSession.sparkContext.accumulator(0)
        fn = _execute_values_partition(
            self.url, db.query("sink_stage").text, "(%s, %s, %s, %s, %s::jsonb, %s, %s)",
            lambda r: (stage_id, dep, batch_id, pg_key(r["key"]), pg_json(r["value"]), _utc(r["event_ts"]),
                       r["version"]),
            conflict_key=lambda t: t[3], version=lambda t: t[6], written=acc,
        )
        df.select("key", "value", "event_ts", "version").foreachPartition(fn)
        return acc.value

    def dry_run(self, df: DataFrame, _batch_id: int = DRY_RUN_BATCH) -> None:
        """Write `df` as far as the staging table and take it back: raises what the real write
        would (a value the database refuses), and leaves the sink untouched."""
        try:
            self.stage(df, self.DRY_RUN_BATCH)
        finally:
            with db.transaction() as conn:
                conn.execute(db.query("sink_staged_clear"), {"stage_id": self.stage_id,
                                                             "deployment_id": self.deployment_id or 0,
                                                             "batch_id": self.DRY_RUN_BATCH})

    def apply_and_commit(self, batch_id: int, n: int, staged: int) -> datetime | None:
        """One transaction: the batch's staged rows into the sink, and its commit row. Raises
        TransientError when fewer than `staged` rows are found; returns None (and applies
        nothing) when the run is fenced."""
        batch = {"stage_id": self.stage_id, "deployment_id": self.deployment_id or 0, "batch_id": batch_id}
        try:
            with db.transaction() as conn:
                got = conn.execute(db.query("sink_apply"), batch).one()
                if got.staged < staged:  # the unlogged table emptied by a crash: write the batch again
                    raise TransientError(f"batch {batch_id}: {got.staged} of {staged} staged rows found at the apply")
                committed = self._commit(conn, batch_id, n)
                if committed is None:
                    raise _Fenced
        except _Fenced:  # rolled back: the stale run's rows never reach the sink
            return None
        return committed


class ParquetSink(BatchSink):
    """One directory per batch id, replaced whole on replay: the same batch always holds the same
    rows. The batch is written aside, and swapped in only while the run is current (dir_swap), so
    neither a crash nor the fenced exit leaves half a batch. One writer per stage: the registry
    refuses replicas of a Parquet sink."""

    def __init__(self, path: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.path = path
        self._recovered = False

    def write(self, df: DataFrame, batch_id: int) -> None:
        root = Path(self.path)
        if not self._recovered:  # a crashed run's swap is finished before this run swaps any
            dir_swap.recover(root, self.deployment_id)
            self._recovered = True
        new = dir_swap.staging_dir(root, f"batch_id={batch_id}", self.deployment_id)
        df.write.parquet(str(new))
        fence(self.stage_id, self.deployment_id, f"the swap of batch {batch_id}")
        dir_swap.replace_dir(new, root / f"batch_id={batch_id}")


class QuarantineSink:
    """Lines that are not records → `quarantine` with the reason, the text and (when the text is
    not exact) the bytes. Never fails the stage for a bad record; a replayed batch adds nothing."""

    def __init__(self, stage_id: str, deployment_id: int | None, abort: threading.Event | None = None):
        self.stage_id = stage_id
        self.deployment_id = deployment_id
        self.abort = abort
        self.url = db.writer_dsn()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        fence(self.stage_id, self.deployment_id, f"quarantine batch {batch_id}")
        stage_id, dep = self.stage_id, self.deployment_id
        base = F.md5(F.concat(F.encode(F.coalesce("source_file", F.lit("")), "UTF-8"), F.lit(bytearray(b"\n")), "raw"))
        keyed = (df.select("source_file", "raw", "reason_kind", "reason", base.alias("base"))
                 .withColumn("n", F.row_number().over(Window.partitionBy("base").orderBy("base"))))
        fn = _execute_values_partition(
            self.url, db.query("quarantine_insert").text, None,
            lambda r: quarantine_values(stage_id, dep, batch_id, r["source_file"], r["raw"],
                                        r["base"] if r["n"] == 1 else f"{r['base']}:{r['n']}", r["reason_kind"],
                                        r["reason"]),
            conflict_key=lambda t: t[4], weigh=lambda t: t[7],
        )
        started = time.monotonic()
        retry_idempotent(lambda: keyed.foreachPartition(fn), f"stage {stage_id}: quarantine batch {batch_id}",
                         abort=self.abort)
        log.debug("stage %s: quarantine batch %d written in %.0f ms", stage_id, batch_id,
                  (time.monotonic() - started) * 1000)


def write_quarantine(url: str, rows: list[tuple[Any, ...]]) -> int:
    """Insert `quarantine_values` rows from the driver (a batch quarantined whole); returns how
    many were new."""
    from psycopg2.extras import execute_values

    conn = db.writer_connection(url)
    added = 0
    try:
        with conn, conn.cursor() as cur:
            for chunk in _chunks(sorted(rows, key=lambda t: t[4]), WRITE_PAGE, lambda t: t[7]):
                added += len(execute_values(cur, db.query("quarantine_insert_counted").text, chunk,
                                            page_size=WRITE_PAGE, fetch=True))
    finally:
        conn.close()
    return added
