"""Fencing in the driver: a run that was replaced writes nothing more and exits.

A run's epoch is its deployment id; `run_is_current` (sql/schema/020_fencing.sql) says whether a
newer run of its stage and role was admitted since. The database refuses a stale run's heartbeat,
metrics and commits; the driver checks before each batch writes, and exits on any refusal.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import NoReturn

from streamops.store import db

log = logging.getLogger("streamops.fencing")


def exit_fenced(stage_id: str, deployment_id: int | None, what: str) -> NoReturn:
    """This run was replaced (a newer run of its stage and role was admitted while it was stopped,
    paused or cut off): exit now, the JVM with it, writing nothing more."""
    log.error("stage %s: action=fenced deployment=%s: a newer run replaced this one (%s refused): exiting "
              "without writing", stage_id, deployment_id, what)
    logging.shutdown()
    os.killpg(os.getpgid(0), signal.SIGKILL)
    raise SystemExit(137)  # not reached: the SIGKILL ends this process with the group


def fence(stage_id: str, deployment_id: int | None, what: str) -> None:
    """Before a batch writes anything: a run that was replaced meanwhile exits instead. A run
    without a deployment (a test's in-process query) is never fenced."""
    if deployment_id and not db.value("run_is_current", deployment_id=deployment_id):
        exit_fenced(stage_id, deployment_id, what)
