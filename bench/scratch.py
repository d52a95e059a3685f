"""A scratch database of a benchmark's own on the server streamops uses, dropped afterwards
(store/scratch.py: the same helper the tests use)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from streamops.store import db, migrate
from streamops.store.scratch import drop_database, recreate_database

__all__ = ["drop_database", "scratch_database", "scratch_site"]


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
