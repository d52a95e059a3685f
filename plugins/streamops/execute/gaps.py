"""Output gaps: availability measured from the output side, whatever the cause (issue 48, item 5).

Every second that input waited and no batch committed is downtime. A PostgreSQL that stalls or
stops, a full checkpoint disk or a driver nobody saw die all leave the stage without commits while
its input waits, and none of them is a dead, stopped or hung driver the watchdog would restart.
So a run whose stage has not committed for longer than its limit (3 triggers, at least
`FLOOR_S`) while its input waits gets an `output_gap` failure: backdated to the stage's last
commit, closed at its next one (`failures_close_healed.sql`), so its downtime is the gap. It is
recorded, not acted on: the watchdog's own kinds (stalled, hung, dead) still restart, and one of
them found later takes the open gap over (`failures.open_failure`). The detail names the cause when
it is known: `database_unavailable`, `disk_full`, `driver_silent`, else `no_progress`.

The supervisor cannot write while the database is away, and the driver commits the moment it is
back, often before the supervisor's next look: so an outage the supervisor lived through is
recorded once its polls work again (`record_outage`), from each stage's commits around it.
"""

from __future__ import annotations

import logging
from collections.abc import Set
from datetime import datetime

from streamops.store import db, failures
from streamops.store import reconfigurations as rstore

log = logging.getLogger("streamops.watchdog")

# A heartbeat's write (a few ms) taking longer than this: the database holds the beats back.
WRITE_PROBE_S = 1.0


def write_gap(limit_s: float = WRITE_PROBE_S) -> str | None:
    """Why a driver's beat would not be written now (it fails, or takes over `limit_s`), else None.
    A database slow to write but quick to read (a migration's lock on `heartbeats`, an fsync
    stall) silences every driver while the silence reads fast: then it proves nothing."""
    try:
        took = failures.beat_write_s(limit_s)
    except db.UNAVAILABLE as e:
        return f"a write probe failed: {first_line(e)}"
    return f"a write probe took {took:.1f}s" if took > limit_s else None


def first_line(e: BaseException) -> str:
    """An error in one line: a database error's own message (not SQLAlchemy's statement dump)."""
    text = str(getattr(e, "orig", None) or e).strip()
    return text.splitlines()[0] if text else type(e).__name__

FLOOR_S = 10.0  # never less: a slow batch or two is not an outage
# An outage is looked at again this long after it ended: a stage's first commit after it, which
# shows it had input, may come a while after the supervisor's first good poll.
OUTAGE_RECHECK_S = 60.0
_DISK_FULL = ("No space left on device", "ENOSPC", "Disk quota exceeded")
_DATABASE = ("OperationalError", "could not connect to server", "connection refused", "Connection refused",
             "server closed the connection", "terminating connection", "the database system is")


def limit_s(trigger_ms: float | None, floor_s: float = FLOOR_S) -> float:
    """Seconds without a commit, while input waits, that are an outage: 3 triggers, at least `floor_s`."""
    return max(3 * (trigger_ms or 1000) / 1000, floor_s)


def cause_of(last_error: str | None, database_gap: str | None, silent: bool) -> str:
    """The cause as far as it is known: the supervisor's own view of the database, the driver's
    last error, the driver's silence."""
    if database_gap is not None or any(m in (last_error or "") for m in _DATABASE):
        return "database_unavailable"
    if any(m in (last_error or "") for m in _DISK_FULL):
        return "disk_full"
    return "driver_silent" if silent else "no_progress"


def waiting(info: dict) -> str:
    """What input waits by a beat: files, or a Kafka stage's lag in records (neither: only the
    batch in flight, which the caller names; a file stage is not a topic)."""
    files, rows = info.get("backlog_files"), info.get("backlog_rows")
    if files:
        return f"{files} input file(s)"
    return f"{rows} record(s) of the topic" if rows else "no file or record"


def gap_of(d, now: datetime, floor_s: float = FLOOR_S) -> float | None:
    """Seconds since the stage's last commit (made while this run ran), when input waits by the
    run's last beat (files not yet read, a Kafka stage's lag, or a batch in flight) and that is past the run's limit;
    else None."""
    info = d.beat_info or {}
    if d.status != "running" or info.get("stop_requested"):
        return None
    if not (info.get("backlog_files") or info.get("backlog_rows") or getattr(d, "trigger_active", False)):
        return None
    # Not before the run's first commit: a starting run's time is its starter's (a recovery, a
    # reconfiguration, a deploy), and a cold first batch is not an outage.
    if d.last_commit_at is None or d.running_at is None or d.last_commit_at < d.running_at:
        return None
    gap = (now - d.last_commit_at).total_seconds()
    return gap if gap > limit_s(_trigger_ms(d), floor_s) else None


def _trigger_ms(d) -> float | None:
    return ((d.config or {}).get("spec") or {}).get("trigger_interval_ms")


def record(candidates, *, floor_s: float = FLOOR_S, database_gap: str | None = None,
           detected_by: str = "supervisor", skip: Set[str] = frozenset(), progress=lambda _: None,
           now: datetime | None = None) -> list[int]:
    """Open an `output_gap` failure for each primary run whose stage is in an output gap (none
    while another failure of it is open, or a reconfiguration runs: those count the gap already;
    nor for the stages in `skip`, whose failure is being recovered now). Returns the ids created.
    `now`: the database's clock (the caller's `db.now()`, else read here), as the commits' times
    are: a gap is never this host's clock minus the database's."""
    if not candidates:
        return []
    now = now or db.now()
    found = [(d, g) for d in candidates if d.role == "primary" and d.stage_id not in skip
             and (g := gap_of(d, now, floor_s)) is not None]
    if not found:
        return []
    changing = rstore.active_stage_ids()
    created = []
    for d, gap in found:
        if d.stage_id in changing:
            continue
        info = d.beat_info or {}
        silent = (d.silent_s or 0) > limit_s(_trigger_ms(d), floor_s)
        cause = cause_of(info.get("last_error"), database_gap, silent)
        detail = (f"cause={cause}: no commit for {gap:.0f}s while input waits "
                  f"({waiting(info)} unread"
                  + (", a batch in flight" if getattr(d, "trigger_active", False) else "") + ")"
                  + (f"; the database: {database_gap}" if database_gap else "")
                  + (f"; the driver's last error: {info['last_error']}" if info.get("last_error") else "")
                  + (f"; no heartbeat for {d.silent_s:.0f}s" if silent else ""))
        fid, _, new = failures.open_failure(d.stage_id, d.app, d.id, "output_gap", detail, d.last_commit_at,
                                            role=d.role, detected_by=detected_by)
        if new:
            created.append(fid)
            log.warning("stage %s: action=output-gap failure=%d: %s", d.stage_id, fid, detail)
            progress(f"{d.stage_id}: output gap: {detail}")
    return created


def record_outage(since: datetime, until: datetime, why: str, *, floor_s: float = FLOOR_S,
                  detected_by: str = "supervisor") -> list[int]:
    """The database was away for the supervisor from `since` (its last good poll) to `until`: an
    `output_gap` failure for each stage that was running across it, had input (it committed within
    its limit before, or its beat says input waits) and committed nothing for longer than its limit
    from its last commit before. Returns the ids of those created."""
    detail = (f"cause=database_unavailable: the database did not answer the supervisor from "
              f"{since.isoformat(timespec='seconds')} to {until.isoformat(timespec='seconds')} ({why})")
    rows = failures.record_outage_gaps(since, until, detail, floor_s, detected_by)
    for r in rows:
        log.warning("stage %s: action=output-gap failure=%d: %s", r.stage_id, r.id, detail)
    return [r.id for r in rows]
