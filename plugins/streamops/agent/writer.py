"""The agent's reports to PostgreSQL (metrics rows, the query's shape, input anomalies), written
in order on a thread of their own and kept while the database is away."""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from streamops.store import db

if TYPE_CHECKING:
    from tenacity import RetryCallState

log = logging.getLogger("streamops.agent")


# Writes whose commit need not wait for the WAL flush: a stage_metrics row lost in a server
# crash is one batch's report missing, and the batch's output and its commit are kept (their
# transactions wait). One batch's row (and a beat, every 5 s) per stage, at 0.1 ms instead of
# 0.26–1.15 ms a commit on this machine's disk (docs/ha.md, "Durability of the database").
REPORTS = frozenset({"metrics_insert"})


class BufferedWriter(threading.Thread):
    """Executes `(query name, params)` in order; keeps up to `max_buffer` while the database is away."""

    def __init__(self, engine: Engine | None, stage_id: str, max_buffer: int = 20_000):
        super().__init__(name=f"writer-{stage_id}", daemon=True)
        self.engine, self.stage_id = engine, stage_id
        # (named statement, its parameters)
        self.inbox: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        self.pending: collections.deque[tuple[str, dict[str, Any]]] = collections.deque(maxlen=max_buffer)
        self._closing = threading.Event()
        self._give_up_at = float("inf")
        self._last_warning = 0.0
        self.dropped = 0

    def submit(self, name: str, params: dict[str, Any]) -> None:
        self.inbox.put((name, params))

    def run(self) -> None:
        from tenacity import RetryError, Retrying, retry_if_exception_type, wait_exponential

        # While the database is away: 0.5, 1, 2 … 10 s between tries, reports kept meanwhile;
        # at shutdown, tries until `close`'s timeout.
        retrying = Retrying(retry=retry_if_exception_type(DBAPIError), wait=wait_exponential(multiplier=0.5, max=10),
                            stop=lambda _: self._closing.is_set() and self._give_up_at < time.monotonic(),
                            before_sleep=self._warn)
        while not (self._closing.is_set() and self.inbox.empty() and not self.pending):
            self._take(timeout=0.5)
            try:
                retrying(self._deliver)
            except RetryError:
                log.error("stage %s: dropping %d unsent reports at shutdown", self.stage_id, len(self.pending))
                return

    def _take(self, timeout: float) -> None:
        """One report from the inbox into `pending` (the oldest dropped when it is full)."""
        try:
            item = self.inbox.get(timeout=timeout)
        except queue.Empty:
            return
        if len(self.pending) == self.pending.maxlen:
            self.dropped += 1
        self.pending.append(item)

    def _deliver(self) -> None:
        """What arrived since the last try, then everything pending."""
        while not self.inbox.empty():
            self._take(timeout=0)
        self._flush()

    def _warn(self, state: RetryCallState) -> None:
        if time.monotonic() - self._last_warning > 30:  # once per 30 s, however long the outage
            e = state.outcome.exception() if state.outcome is not None else None  # set before a sleep
            why = str(getattr(e, "orig", e)).strip().splitlines()  # a DBAPIError's driver error
            log.warning("stage %s: database unreachable, %d reports buffered: %s",
                        self.stage_id, len(self.pending), why[0] if why else e)
            self._last_warning = time.monotonic()

    def _flush(self) -> None:
        while self.pending:
            name, params = self.pending[0]
            with db.transaction(self.engine, durable=name not in REPORTS) as conn:
                conn.execute(db.query(name), params)
            self.pending.popleft()

    def close(self, timeout_s: float = 10) -> None:
        self._give_up_at = time.monotonic() + timeout_s
        self._closing.set()
        self.join(timeout_s + 2)
