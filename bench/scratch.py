"""A scratch database of a benchmark's own on the server streamops uses, dropped afterwards
(store/scratch.py: the same helper the tests use)."""

from __future__ import annotations

from streamops.store import db
from streamops.store.scratch import drop_database, recreate_database

__all__ = ["drop_database", "scratch_database"]


def scratch_database(name: str) -> tuple[str, str]:
    """(url of a fresh database `name`, url of the server, for `drop_database(server, name)`)."""
    server = db.libpq_url(db.database_url())
    return recreate_database(server, name), server
