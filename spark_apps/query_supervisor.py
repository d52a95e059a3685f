"""The driver's query supervisor: a failed query is restarted in the same driver (no new JVM),
and its failed batch is counted in the poison book (retried, quarantined, or the run fails).
An infrastructure error (errors.classify) is never counted against a batch."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamops import checkpoint_layout as checkpoint
from streamops.agent import data_loss, state_schema
from streamops.agent.errors import ErrorClass, classify
from streamops.agent.poison import FailedBatch, PoisonBook, error_signature, isolate, telling_error
from streamops.checkpoint_layout import QUERIES, query_checkpoint
from streamops.registry import Stage

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

# (query, files its source skips) → the query started again
Restart = Callable[[str, list[str]], "StreamingQuery"]

log = logging.getLogger("streamops.run_stage")


class QuerySupervisor:
    """Restarts a failed query in this driver (no new JVM) and, through the poison book, counts
    its failed batch: retried, quarantined whole after the stage's `poison_after_failures`, or
    (when the run itself looks broken) the run fails and the watchdog or the rollback takes over."""

    GENERIC_LIMIT = 3  # failures in a row that no batch can be blamed for

    def __init__(self, stage: Stage, ckpt: Path, book: PoisonBook, restart: Restart, stopping: threading.Event,
                 fails_alone: Callable[[tuple[str, ...]], str | None] | None = None,
                 on_error: Callable[[str], None] = lambda _: None, by_file: bool = True) -> None:
        self.stage, self.ckpt, self.book, self.restart, self.stopping = stage, ckpt, book, restart, stopping
        self.by_file = by_file  # False: a Kafka source, whose batches have no files to bisect
        self.fails_alone = fails_alone  # a dry run of some of a batch's files: its error, or None
        self.on_error = on_error  # the agent's beats name it (the cause of an output gap)
        self.excluded = book.excluded_files()
        self.failures_in_a_row = 0
        self.open: dict[str, int] = {}  # query → the failed batch awaiting its commit

    def check(self, queries: list[StreamingQuery]) -> str | None:
        """Restart what died; returns why the run must fail, or None."""
        for i, q in enumerate(queries):
            if q.isActive:
                continue
            which = QUERIES[i]
            exc = q.exception()
            text = str(exc) if exc else "the query stopped by itself"
            self.on_error(telling_error(text))
            why, backoff_s = self._handle(which, text, classify(_java_exception(q) or exc or text))
            if why:
                return f"query {q.name} terminated: {why}"
            if self.stopping.wait(backoff_s):
                return None  # a stop came while backing off: nothing to restart
            queries[i] = self.restart(which, self.excluded[which])
            log.info("action=restart-query query=%s excluded_files=%d", which, len(self.excluded[which]))
        self._closed_episodes()
        return None

    def _handle(self, which: str, text: str, cls: ErrorClass) -> tuple[str | None, float]:
        """(why the run must fail, or None; seconds to wait before the restart)."""
        error = error_signature(text)
        self.failures_in_a_row += 1
        backoff_s = min(2 ** self.failures_in_a_row, 30)
        if cls.kind == "data_lost":  # fails the same way on every retry: the run fails, naming the gap
            source = self.stage.source
            why = data_loss.reason(getattr(source, "topic", "?"), getattr(source, "bootstrap_servers", None), text)
            log.error("action=query-failed query=%s %s", which, why)
            return why, 0
        if cls.kind == "incompatible":  # the new code's state: fails the same way on every retry
            why = state_schema.reason(cls.name, text, query_checkpoint(which, self.ckpt))
            log.error("action=query-failed query=%s %s", which, why)
            return why, 0
        if cls.kind == "transient":
            log.warning("action=query-failed query=%s transient (%s), restarting: %s", which, cls.name, error)
            return None, backoff_s
        if cls.kind == "infrastructure":  # not the data's: a new run (the supervisor's restart) may help
            log.error("action=query-failed query=%s %s (%d in a row): %s", which, cls, self.failures_in_a_row, error)
            return (f"{error} [{cls}]" if self.failures_in_a_row >= self.GENERIC_LIMIT else None), backoff_s
        qckpt = query_checkpoint(which, self.ckpt)
        planned, committed = checkpoint.last_planned_batch(qckpt), checkpoint.last_committed_batch(qckpt)
        if planned is None or planned == committed:
            log.error("action=query-failed query=%s no batch to blame (%d in a row): %s", which,
                      self.failures_in_a_row, error)
            return (error if self.failures_in_a_row >= self.GENERIC_LIMIT else None), backoff_s
        fb = FailedBatch(which, planned, tuple(checkpoint.batch_files(qckpt, planned)), error, str(cls))
        verdict = self.book.record(fb, self.stage.poison_after_failures)
        self.open[which] = planned
        if verdict.action == "fail":
            return f"{error} (batch {planned}: {verdict.why})", 0
        if verdict.action == "quarantine" and not self.by_file:
            # No file to blame and leave out: skipping records of a topic would be silent loss.
            why = (f"batch {planned} reads a Kafka topic, which is not bisected: nothing quarantined; the run "
                   f"fails for a restart [{cls}]")
            self.book.not_blamed(fb, why)
            return f"{error} ({why})", 0
        if verdict.action == "quarantine":
            blamed = fb.files  # the quarantine query's: only their invalid lines are written
            if which == "main":
                blamed = isolate(fb.files, error, self.fails_alone) if self.fails_alone is not None else ()
                log.info("action=isolate batch=%d blamed %d of %d file(s): %s", planned, len(blamed), len(fb.files),
                         ", ".join(Path(f).name for f in blamed))
            if not blamed:
                why = (f"no file of batch {planned} fails alone in a dry run: nothing quarantined; the run fails "
                       f"for a restart [{cls}]")
                self.book.not_blamed(fb, why)
                return f"{error} ({why})", 0
            self.book.quarantine(fb, verdict.attempts, blamed)
            self.excluded[which] = sorted(set(self.excluded[which]) | set(blamed))
            return None, 0  # the cause is gone: restart at once
        return None, backoff_s

    def on_commit(self, batch_id: int) -> None:
        """The main query committed a batch (called from its sink)."""
        self.failures_in_a_row = 0
        if "main" in self.open:
            self.open.pop("main")
            self.book.committed("main", batch_id)

    def _closed_episodes(self) -> None:
        if "quarantine" in self.open:
            done = checkpoint.last_committed_batch(query_checkpoint("quarantine", self.ckpt))
            if done is not None and done >= self.open["quarantine"]:
                self.open.pop("quarantine")
                self.book.committed("quarantine", done)


def _java_exception(q: StreamingQuery) -> Any:
    """The query's Java exception itself (py4j), whose classes and causes `classify` walks:
    PySpark's StreamingQuery.exception() keeps only its cause's conversion. None if not there."""
    try:
        j = q._jsq.exception()
        return j.get() if j.isDefined() else None
    except Exception:  # noqa: BLE001 - no JVM query behind `q` (a test's, or a stopped session)
        return None
