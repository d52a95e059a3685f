"""The watchdog's limits, pure: when a silent driver is hung, when a beating one is stalled, when a
launch has failed, and how long to wait between the restarts of a failure."""

from __future__ import annotations

import random

# A run still `starting` this long after it was admitted (no pid: its launch never completed; a
# pid: its driver never came up) has failed to launch.
LAUNCH_LIMIT_S = 300.0
LAUNCH_RETRIES = 10  # with the backoff, about six minutes of a master or a worker away
# Restarts of a stage that fails by itself: 2, 4, 8, ... s apart (jittered), at most 30 s.
RESTART_BACKOFF_S, RESTART_BACKOFF_CAP_S = 2.0, 30.0


def silent_too_long(silent_s: float | None, server_up_s: float | None, stale_s: float) -> bool:
    """Is a heartbeat this old a hung driver? Not within `stale_s` of a database restart: the
    restart silenced every driver at once, and each needs a beat's time to reconnect."""
    return silent_s is not None and silent_s > stale_s and (server_up_s is None or server_up_s > stale_s)


# A beating driver that has committed nothing for this long while input waits is stalled (a batch
# blocked in the sink, a wedged query): well past a slow batch, and under the 5 min statement
# timeout that would end a blocked sink write anyway.
STALL_S = 180.0


def stalled_for(beat_info: dict | None, silent_s: float | None, stall_s: float | None) -> float | None:
    """Seconds without progress while input waits, by the driver's last beat (plus the beat's own
    age), when past `stall_s`; else None. Not while the run is stopping."""
    info = beat_info or {}
    # input waits: files, or a Kafka stage's lag in records
    if not stall_s or info.get("stop_requested") or not (info.get("backlog_files") or info.get("backlog_rows")) \
            or info.get("since_progress_s") is None:
        return None
    idle = float(info["since_progress_s"]) + float(silent_s or 0)
    return idle if idle > stall_s else None


def restart_delay(kind: str, attempts: int, base_s: float = RESTART_BACKOFF_S,
                  rng: random.Random | None = None) -> float:
    """Seconds to wait before restart number `attempts + 1` of the same failure: none for the
    first, then doubling (base_s, 2 base_s, ...) up to a cap, drawn from the upper half of the step
    so that stages failing together do not restart in step. A launch failure (the infrastructure)
    waits longer."""
    if attempts <= 0:
        return 0.0
    base, cap = (5.0, 60.0) if kind == "launch_failed" else (base_s, RESTART_BACKOFF_CAP_S)
    step = min(base * 2 ** (attempts - 1), cap)
    return step / 2 + (rng or random).uniform(0, step / 2)
