"""Apply `sql/schema/NNN_name.sql` in order, once each, each in its own transaction; then
(re)create the `reporting` schema from `sql/reports/*.sql` whenever those files change."""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine, text

from streamops.paths import sql_dir

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")
# Any constant works; it only has to be the same for every process that migrates.
_LOCK_KEY = 0x5354524D  # "STRM"

_BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


_REPORTS_BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS schema_reports (
    id         boolean PRIMARY KEY DEFAULT true CHECK (id),
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


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


def apply(engine: Engine, directory: Path | None = None) -> list[Migration]:
    """Apply pending migrations; returns those applied now. Safe to run concurrently and repeatedly."""
    applied_now = []
    for m in discover(directory):
        # One transaction per file: a failing file leaves no trace, and earlier files stay applied.
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
            conn.exec_driver_sql(_BOOKKEEPING)
            row = conn.execute(
                text("SELECT checksum FROM schema_migrations WHERE version = :v"), {"v": m.version}
            ).first()
            if row is not None:
                if row.checksum != m.checksum:
                    log.warning("migration %s was edited after it was applied; add a new migration instead", m.path.name)
                continue
            try:
                # The raw cursor with no parameters: `%` in plpgsql format() strings stays literal.
                conn.connection.cursor().execute(m.sql)
            except Exception as e:
                cause = getattr(e, "orig", e)
                raise MigrationError(f"migration {m.path.name} failed and was rolled back: {cause}".strip()) from e
            conn.execute(
                text("INSERT INTO schema_migrations (version, name, checksum) VALUES (:v, :n, :c)"),
                {"v": m.version, "n": m.name, "c": m.checksum},
            )
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
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
        conn.exec_driver_sql(_REPORTS_BOOKKEEPING)
        if conn.execute(text("SELECT checksum FROM schema_reports")).scalar() == digest:
            return False
        cur = conn.connection.cursor()
        cur.execute("DROP SCHEMA IF EXISTS reporting CASCADE")
        for p in files:
            try:
                cur.execute(p.read_text())
            except Exception as e:
                raise MigrationError(f"reporting SQL {p.name} failed and was rolled back: {e}".strip()) from e
        conn.execute(text("INSERT INTO schema_reports (checksum) VALUES (:c) "
                          "ON CONFLICT (id) DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = now()"),
                     {"c": digest})
    log.info("re-created the reporting schema from %d file(s)", len(files))
    return True
