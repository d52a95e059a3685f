"""Failure events: each new row of `failures` runs the `streamops_watchdog` DAG within seconds.

Airflow 3 event-driven scheduling. The asset `streamops_failures` has an AssetWatcher whose
trigger, `FailureEventTrigger`, runs in Airflow's triggerer process: every `poll_s` it reads the
failures recorded since the last one it saw (sql/queries/failures_since.sql) and yields one
TriggerEvent naming them. The triggerer turns the event into an asset event, and the scheduler
queues a run of every DAG scheduled on the asset (the watchdog, which also keeps its per-minute
sweep through AssetOrTimeSchedule).

The watcher's trigger is only running while the DAG is unpaused (Airflow registers asset
triggers for active assets of unpaused DAGs) and a triggerer is up. It starts from the newest
failure at that moment: failures recorded before, or while no triggerer ran, do not fire; the
per-minute sweep is what catches them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from streamops.store import db

ASSET_NAME = "streamops_failures"
ASSET_URI = "x-streamops://failures"  # an `x-` scheme: Airflow keeps it as written
WATCHER_NAME = "streamops_failures_watcher"
# An insert whose transaction commits late has an id below ids already seen (ids are drawn at
# insert time): the trigger re-reads this many ids below the newest it saw and fires the unseen.
LOOKBACK_IDS = 200
BATCH = 100  # failures per event at most; the rest fire on the next poll
ERROR_LOG_EVERY_S = 60.0  # while the database stays unreachable, say so once a minute


def failures_asset(poll_s: float = 1.0):
    """The asset the watchdog DAG is scheduled on, watched by a FailureEventTrigger."""
    from airflow.sdk import Asset, AssetWatcher

    return Asset(name=ASSET_NAME, uri=ASSET_URI,
                 watchers=[AssetWatcher(name=WATCHER_NAME, trigger=FailureEventTrigger(poll_s=poll_s))])


class Watermark:
    """Which failures have fired: every id above `start` (the newest failure when watching began)
    fires once, also one that commits after higher ids were seen (within LOOKBACK_IDS)."""

    def __init__(self, start_id: int):
        self.start = start_id
        self.high = start_id
        self.seen: set[int] = set()

    def after(self) -> int:
        """Read failures with an id above this."""
        return max(self.start, self.high - LOOKBACK_IDS)

    def take(self, failures: list[dict], limit: int = BATCH) -> list[dict]:
        """The first `limit` failures not fired yet, now marked as fired."""
        new = [f for f in failures if f["id"] > self.start and f["id"] not in self.seen][:limit]
        self.seen.update(f["id"] for f in new)
        self.high = max([self.high, *self.seen])
        floor = self.after()
        self.seen = {i for i in self.seen if i > floor}
        return new


def newest_failure_id() -> int:
    return int(db.value("failures_max_id") or 0)


def failures_after(after_id: int, limit: int) -> list[dict]:
    """Failures with an id above `after_id`, oldest first, as JSON-able dicts."""
    return [{"id": r.id, "stage_id": r.stage_id, "app": r.app, "role": r.role, "kind": r.kind,
             "detected_by": r.detected_by, "detected_at": r.detected_at.isoformat() if r.detected_at else None}
            for r in db.rows("failures_since", after_id=after_id, lim=limit)]


def event_payload(failures: list[dict]) -> dict[str, Any]:
    return {"failure_ids": [f["id"] for f in failures],
            "stage_ids": sorted({f["stage_id"] for f in failures}),
            "failures": failures}


class FailureEventTrigger(BaseEventTrigger):
    """Yields a TriggerEvent for each poll that finds new failures (payload: `event_payload`).

    Its kwargs are only `poll_s`: Airflow identifies an asset trigger by the hash of its classpath
    and kwargs (BaseEventTrigger.hash), so nothing that changes between DAG parses (a start id, a
    time) may be a kwarg; the start is read in run(). The database is the process's
    (STREAMOPS_DATABASE_URL, else the embedded cluster under STREAMOPS_HOME), which the triggerer
    gets from orchestrate/airflow_home.py. Queries run in a thread: the triggerer's event loop
    runs every trigger. An unreachable database is logged and retried; it never ends the trigger.
    """

    def __init__(self, poll_s: float = 1.0):
        super().__init__()
        self.poll_s = float(poll_s)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {"poll_s": self.poll_s}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        mark: Watermark | None = None
        failing_since: float | None = None
        last_error_log = 0.0
        while True:
            try:
                if mark is None:
                    mark = Watermark(await asyncio.to_thread(newest_failure_id))
                    self.log.info("watching failures after id %d (every %.1fs)", mark.start, self.poll_s)
                rows = await asyncio.to_thread(failures_after, mark.after(), LOOKBACK_IDS + BATCH)
            except Exception as e:  # the database may come and go: the trigger must not end
                now = time.monotonic()
                if failing_since is None or now - last_error_log >= ERROR_LOG_EVERY_S:
                    self.log.warning("cannot read the failures table (database unreachable?), retrying every %.1fs: %s",
                                     self.poll_s, str(e).splitlines()[0] if str(e) else type(e).__name__)
                    last_error_log = now
                failing_since = failing_since or now
            else:
                if failing_since is not None:
                    self.log.info("failures table readable again after %.0fs", time.monotonic() - failing_since)
                    failing_since = None
                new = mark.take(rows)
                if new:
                    payload = event_payload(new)
                    self.log.info("new failures %s of stages %s", payload["failure_ids"], payload["stage_ids"])
                    yield TriggerEvent(payload)
                    if len(new) == BATCH:
                        continue  # more are waiting: read again at once
            await asyncio.sleep(self.poll_s)
