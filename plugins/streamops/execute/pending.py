"""Pending reconfigurations that nobody will run as they were asked for are cancelled, with the
reason (issue 48 item 3): a change must never run later, unasked.

A `pending` row is its asker's to run at once: a person's request is executed as it is made
(`reconfigure.execute_requested`, which waits BUSY_WAIT_S at most for a busy stage and cancels
the row on any end before it starts), and a scale-out re-plan grants is realized by the run
that granted it. One still pending PENDING_MAX_S later has lost its asker (a task killed with
SIGKILL, a crashed CLI): `cancel_stale` cancels it. A scale-in or a migration waits for its
app's maintenance window (the window DAG, `reconfigure --pending`): it is stale once the first
window after it was asked for has closed, PENDING_MAX_S after (the window's last action may
still be starting). The supervisor's housekeeping and the watchdog run `cancel_stale`;
`streamops down` cancels every pending row (`cancel_all`): a new start begins with none.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import Row

from streamops import registry
from streamops.plan.application import AppView, maintenance_window
from streamops.plan.kinds import Action, RunStatus
from streamops.store import db
from streamops.store import reconfigurations as rstore

log = logging.getLogger("streamops.reconfigure")
Progress = Callable[[str], None]

PENDING_MAX_S = 600.0
DEFERRED = (Action.SCALE_IN, Action.MIGRATE)  # realized in the app's maintenance window
# A deferred row of an app the registry does not have (removed, or added after the reader loaded
# it): not cancelled before a day, the longest gap between two daily windows.
UNKNOWN_APP_MAX_S = 86_400.0


def deadline(row: Row, reg: registry.Registry) -> datetime:
    """When pending row `row` becomes stale: PENDING_MAX_S after it was asked for, or for a
    scale-in or a migration of an app in the registry, PENDING_MAX_S after the close of the first
    maintenance window open at or after that."""
    at: datetime = row.requested_at.astimezone(UTC)  # the window's cron is read in UTC
    grace = timedelta(seconds=PENDING_MAX_S)
    app = reg.apps.get(row.app)
    if row.action not in DEFERRED:
        return at + grace
    if app is None:  # an app gone from the registry: no window DAG will run it
        return at + timedelta(seconds=UNKNOWN_APP_MAX_S)
    mw = app.maintenance_window
    w = maintenance_window(AppView(row.app, app.r_max_ms, mw.cron, mw.duration_min, mw.max_actions), at)
    opens = w.start if w.open and w.start is not None else w.next_open
    return max(at, opens + timedelta(minutes=mw.duration_min)) + grace


def cancel_stale(reg: registry.Registry | None = None, progress: Progress = lambda _: None,
                 now: datetime | None = None) -> list[int]:
    """Cancel the pending rows past their `deadline`, each with why; the ids cancelled. A row
    whose stage lock is held is left for the next pass (its executor may be claiming it). `now`
    is the database's: `requested_at` is its clock too (docs/ha.md, "Clocks")."""
    reg = reg or registry.load()
    now = now or db.now()
    cancelled = []
    for row in rstore.to_run((RunStatus.PENDING,), None, None, None):
        due = deadline(row, reg)
        if now < due:
            continue
        asked = f"asked for by {row.requested_by} at {row.requested_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
        if row.action in DEFERRED and row.app in reg.apps:
            closed = due - timedelta(seconds=PENDING_MAX_S)
            why = f"cancelled: stale, its app's maintenance window closed at {closed:%H:%M} UTC before it ran ({asked})"
        else:
            why = (f"cancelled: stale, still pending {PENDING_MAX_S:.0f}s after it was {asked}: the run that was to "
                   "realize it failed or is gone")
        why += "; nothing was changed; request it again"
        with rstore.stage_lock(row.stage_id) as free:
            if not free or not rstore.cancel_pending(row.id, why):
                continue
        cancelled.append(row.id)
        log.warning("stage %s: action=cancel reconfiguration=%d %s", row.stage_id, row.id, why)
        progress(f"{row.stage_id}: reconfiguration {row.id} {why}")
    return cancelled


def cancel_all(why: str, progress: Progress = lambda _: None) -> list[int]:
    """Cancel every pending row with `why` (the platform going down); the ids cancelled."""
    rows = rstore.cancel_all_pending(why)
    for r in rows:
        target = r.target_cores if r.target_cores is not None else r.target_pool
        log.warning("stage %s: action=cancel reconfiguration=%d %s→%s %s", r.stage_id, r.id, r.action, target, why)
        progress(f"{r.stage_id}: reconfiguration {r.id} ({r.action}→{target}) {why}")
    return [r.id for r in rows]
