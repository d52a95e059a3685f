"""Apply `sql/schema/NNN_name.sql` in order, once each, each in its own transaction; then
(re)create the `reporting` schema from `sql/reports/*.sql` whenever those files change."""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine

from streamops.paths import sql_dir
from streamops.store import db

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")
# Any constant works; it only has to be the same for every process that migrates.
_LOCK_KEY = 0x5354524D  # "STRM"


class MigrationError(RuntimeError):
    """A schema file failed; its transaction was rolled back."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path

    @property
    def sql(self) -> str:
        return self.path.read_text()

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def discover(directory: Path | None = None) -> list[Migration]:
    directory = directory or sql_dir() / "schema"
    found = []
    for p in sorted(directory.glob("*.sql")):
        m = _NAME.match(p.name)
        if not m:
            raise ValueError(f"{p}: migration files are named NNN_name.sql (three digits, lower-case name)")
        found.append(Migration(int(m.group(1)), m.group(2), p))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise ValueError(f"{directory}: two migrations share a version number: {versions}")
    return found


def apply(engine: Engine | None = None, directory: Path | None = None) -> list[Migration]:
    """Apply pending migrations (to the process's database, or `engine`); returns those applied
    now. Safe to run concurrently and repeatedly."""
    engine = engine or db.engine()
    applied_now = []
    for m in discover(directory):
        # One transaction per file: a failing file leaves no trace, and earlier files stay applied.
        with engine.begin() as conn:
            conn.execute(db.query("migrations_lock"), {"k": _LOCK_KEY})
            conn.execute(db.query("migrations_bookkeeping"))
            row = conn.execute(db.query("migration_checksum"), {"v": m.version}).first()
            if row is not None:
                if row.checksum != m.checksum:
                    log.warning("migration %s was edited after it was applied; add a new migration instead",
                                m.path.name)
                continue
            try:
                # The raw cursor with no parameters: `%` in plpgsql format() strings stays literal.
                conn.connection.cursor().execute(m.sql)
            except Exception as e:
                cause = getattr(e, "orig", e)
                raise MigrationError(f"migration {m.path.name} failed and was rolled back: {cause}".strip()) from e
            conn.execute(db.query("migration_record"), {"v": m.version, "n": m.name, "c": m.checksum})
            applied_now.append(m)
            log.info("applied migration %s", m.path.name)
    if directory is None:
        apply_reports(engine)
    return applied_now


def apply_reports(engine: Engine, directory: Path | None = None) -> bool:
    """Drop and re-create the `reporting` schema from `sql/reports/*.sql` (name order, one
    transaction) if the files changed since the last time. Views and functions there are derived
    objects: replacing them whole lets their columns evolve without numbered migrations."""
    directory = directory or sql_dir() / "reports"
    files = sorted(directory.glob("*.sql"))
    if not files:
        return False
    digest = hashlib.sha256(b"".join(p.name.encode() + b"\0" + p.read_bytes() for p in files)).hexdigest()
    with engine.begin() as conn:
        conn.execute(db.query("migrations_lock"), {"k": _LOCK_KEY})
        conn.execute(db.query("reports_bookkeeping"))
        if conn.execute(db.query("reports_checksum")).scalar() == digest:
            return False
        cur = conn.connection.cursor()
        cur.execute(db.query("reports_drop").text)
        for p in files:
            try:
                cur.execute(p.read_text())
            except Exception as e:
                raise MigrationError(f"reporting SQL {p.name} failed and was rolled back: {e}".strip()) from e
        conn.execute(db.query("reports_record"), {"c": digest})
    log.info("re-created the reporting schema from %d file(s)", len(files))
    return True
