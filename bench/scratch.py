"""A scratch database of a benchmark's own on the server streamops uses, dropped afterwards
(store/scratch.py: the same helper the tests use)."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from streamops.store import db, migrate
from streamops.store.scratch import drop_database, recreate_database

__all__ = ["drop_database", "end_run", "scratch_database", "scratch_site"]


def scratch_database(name: str) -> tuple[str, str]:
    """(url of a fresh database `name`, url of the server, for `drop_database(server, name)`)."""
    server = db.libpq_url(db.database_url())
    return recreate_database(server, name), server


def scratch_site(name: str, prefix: str) -> tuple[str, str, Path]:
    """A benchmark's own database `name` (migrated) and state directory, which this process and
    every driver it launches use from now on: (database url, server url, home)."""
    url, server = scratch_database(name)
    home = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(home, 0o755)  # drivers run as this user; the embedded cluster's tools may not
    os.environ["STREAMOPS_DATABASE_URL"] = url  # this process and every driver it launches
    os.environ["STREAMOPS_HOME"] = str(home)    # checkpoints, inputs, logs, pid files
    db.engine.cache_clear()
    migrate.apply(db.engine())
    return url, server, home


def end_run(sid: str, reg, stop: threading.Event, feed: threading.Thread, out_dir: Path, requested_by: str,
            say: Callable[[str], None], deadline_s: float = 30) -> None:
    """A measured run's end, whatever happened in it: the feed stopped, the stage stopped (a
    failure to stop is said, not raised: the next run is still measured) and its input removed."""
    from streamops.execute import stages

    stop.set()
    if feed.is_alive():
        feed.join(10)
    try:
        stages.stop_stage(sid, reg, deadline_s=deadline_s, requested_by=requested_by)
    except Exception as e:  # noqa: BLE001 - keep measuring the next run
        say(f"{sid}: stop failed: {e}")
    shutil.rmtree(out_dir, ignore_errors=True)
