"""Connections: one SQLAlchemy engine per process, and named SQL files from `sql/queries/`."""

from __future__ import annotations

import functools
import os

from sqlalchemy import Engine, TextClause, create_engine, text

from streamops.paths import sql_dir
from streamops.store import embedded


class DatabaseUnavailable(RuntimeError):
    """No database is configured or it cannot be reached."""


def database_url() -> str:
    """`STREAMOPS_DATABASE_URL`, else the running embedded cluster's URL."""
    url = os.environ.get("STREAMOPS_DATABASE_URL")
    if url:
        return url
    c = embedded.load_record()
    if c is None:
        raise DatabaseUnavailable(
            "no database: run `streamops db up` for the embedded cluster, or set STREAMOPS_DATABASE_URL"
        )
    return c.url("streamops")


def sqlalchemy_url(url: str) -> str:
    """`postgresql://…` with the psycopg2 driver spelled out: SQLAlchemy 2.1 would otherwise pick psycopg 3."""
    return "postgresql+psycopg2://" + url.removeprefix("postgresql://") if url.startswith("postgresql://") else url


def libpq_url(url: str) -> str:
    """The same URL without a driver suffix, for psql and psycopg2.connect."""
    scheme, rest = url.split("://", 1)
    return f"{scheme.split('+')[0]}://{rest}"


@functools.cache
def engine(url: str | None = None) -> Engine:
    # pool_pre_ping: a stage outlives database restarts; a stale pooled connection must not kill a write.
    return create_engine(sqlalchemy_url(url or database_url()), pool_pre_ping=True, pool_size=5, max_overflow=5)


@functools.cache
def query(name: str) -> TextClause:
    """The statement in `sql/queries/<name>.sql`."""
    return text((sql_dir() / "queries" / f"{name}.sql").read_text())
