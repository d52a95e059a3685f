"""Connections: one SQLAlchemy engine per process, and named SQL files from `sql/queries/`."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, Row, TextClause, create_engine, text
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

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


def with_database(url: str, name: str) -> str:
    """`url` (libpq form) pointing at database `name` on the same server, its query (`passfile`,
    timeouts) kept."""
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(libpq_url(url))._replace(path=f"/{name}"))


def writer_dsn() -> str:
    """The process's database as a libpq URL for psycopg2.connect outside SQLAlchemy (the sinks
    in the executors), with the same timeouts as `engine()`'s connections."""
    from urllib.parse import quote, urlencode

    url = libpq_url(database_url())
    params = urlencode(connect_args(), quote_via=quote)
    return f"{url}{'&' if '?' in url else '?'}{params}"


def writer_connection(dsn: str | None = None) -> Any:
    """A psycopg2 connection outside SQLAlchemy, to `dsn` (default `writer_dsn()`): the sinks'
    writers in the executors, which carry the driver's `writer_dsn()` as a string, and the
    driver's whole-batch quarantine. The caller closes it."""
    import psycopg2

    return psycopg2.connect(dsn or writer_dsn())


def masked_url(url: str) -> str:
    """`url` for printing: its password (if any) as ***."""
    from sqlalchemy.engine import make_url

    return libpq_url(make_url(url).render_as_string(hide_password=True))


# The fault injector's database outage (`db_outage`): until this monotonic time, every database
# access of this process fails as an unreachable server does, through the same error paths.
_outage_until = 0.0


def inject_outage(seconds: float) -> None:
    global _outage_until
    _outage_until = time.monotonic() + seconds


def check_outage() -> None:
    if time.monotonic() < _outage_until:
        import psycopg2

        raise OperationalError("connect", {}, psycopg2.OperationalError(
            "could not connect to server: Connection refused (injected database outage)"))


# What a database away, stopped or stalled raises: a driver error (a refused connection, a
# statement cancelled, a lock not granted), no connection free in the pool, none configured.
UNAVAILABLE = (DBAPIError, PoolTimeout, DatabaseUnavailable)


# Every connection of the platform: a server that stops answering (stopped, stalled, a network
# cut) is noticed within seconds, and no statement holds a connection (and its caller) forever.
# STREAMOPS_STATEMENT_TIMEOUT_MS overrides the statement limit (0: none).
CONNECT_ARGS = {"connect_timeout": 10, "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
                "keepalives_count": 3}


def statement_timeout_ms() -> int:
    return int(os.environ.get("STREAMOPS_STATEMENT_TIMEOUT_MS", 300_000))


def connect_args() -> dict[str, Any]:
    """CONNECT_ARGS, the statement limit, and an application_name naming this process, so that
    pg_stat_activity (a lock wait, a long query) says whose session it is."""
    import sys

    who = f"streamops {os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else 'python'} pid={os.getpid()}"
    return {**CONNECT_ARGS, "options": f"-c statement_timeout={statement_timeout_ms()}", "application_name": who[:63]}


@functools.cache
def engine(url: str | None = None) -> Engine:
    # pool_pre_ping: a stage outlives database restarts; a stale pooled connection must not kill a write.
    return create_engine(sqlalchemy_url(url or database_url()), pool_pre_ping=True, pool_size=5, max_overflow=5,
                         connect_args=connect_args())


_QUERY_NAME = re.compile(r"(?:(bench)/)?(\w+)")


def query_path(name: str) -> Path:
    """`sql/queries/<name>.sql`; a benchmark's own, `bench/<name>`, is `sql/bench/<name>.sql`."""
    m = _QUERY_NAME.fullmatch(name)
    if m is None:
        raise ValueError(f"bad query name {name!r}: a file name in sql/queries/, or bench/<name> for sql/bench/")
    return sql_dir() / (m[1] or "queries") / f"{m[2]}.sql"


@functools.cache
def query(name: str) -> TextClause:
    """The statement in `sql/queries/<name>.sql` (`bench/<name>`: in `sql/bench/`)."""
    path = query_path(name)
    if not path.is_file():
        raise FileNotFoundError(f"no named query {name!r}: {path} does not exist")
    return text(path.read_text())


# -- units of work: the only way code outside store/ reaches the database ------------------------
@contextlib.contextmanager
def transaction(on: Engine | None = None, durable: bool = True) -> Iterator[Connection]:
    """A connection in a transaction, committed on success and rolled back on an exception;
    on the process's database, or on engine `on` (a test's, a report's own). `durable=False`:
    the commit returns before its WAL is on disk (SET LOCAL synchronous_commit = off), for
    writes a server crash may lose without harm: a driver's metrics row and heartbeat."""
    check_outage()
    with (on or engine()).begin() as conn:
        if not durable:
            conn.execute(query("commit_without_wait"))
        yield conn


@contextlib.contextmanager
def connection(on: Engine | None = None) -> Iterator[Connection]:
    """A connection for reads (autobegin; nothing is committed unless the caller commits)."""
    check_outage()
    with (on or engine()).connect() as conn:
        yield conn


def rows(name: str, **params: Any) -> list[Row[Any]]:
    """Every row of the named query."""
    check_outage()
    with engine().connect() as conn:
        return list(conn.execute(query(name), params).all())


def row(name: str, **params: Any) -> Row[Any] | None:
    """The first row of the named query, or None."""
    check_outage()
    with engine().connect() as conn:
        return conn.execute(query(name), params).first()


def one(name: str, **params: Any) -> Row[Any]:
    """The row of the named query that must exist (a row by its id); LookupError when it does not."""
    if (r := row(name, **params)) is None:
        raise LookupError(f"{name}: no row for {params}")
    return r


def value(name: str, **params: Any) -> Any:
    """The first column of the first row of the named query, or None."""
    check_outage()
    with engine().connect() as conn:
        return conn.execute(query(name), params).scalar()


def now() -> datetime:
    """The database's clock (`clock_timestamp()`): where two processes, or hosts, compare times,
    both read this one, never their own wall clocks (docs/ha.md, "Clocks"). In UTC whatever the
    server's TimeZone: maintenance-window crons are read in the zone a time carries."""
    at: datetime = value("db_now")
    return at.astimezone(UTC)


def time_of(mono: float | None) -> datetime:
    """A moment this process saw, timed with `time.monotonic()` (None: now), dated by the database's
    clock: the database's now less the monotonic time since. For a time kept without the database
    (it may be away) and stored later beside the times of other processes."""
    at = now()
    return at if mono is None else at - timedelta(seconds=max(0.0, time.monotonic() - mono))


def write(name: str, **params: Any) -> Row[Any] | None:
    """Run the named statement in its own transaction; its first RETURNING row, if any."""
    check_outage()
    with engine().begin() as conn:
        res = conn.execute(query(name), params)
        return res.first() if res.returns_rows else None


def write_returning(name: str, **params: Any) -> Row[Any]:
    """Run the named statement (an INSERT ... RETURNING) in its own transaction; the row it returns."""
    if (r := write(name, **params)) is None:
        raise LookupError(f"{name}: returned no row for {params}")
    return r


def explain(name: str, params: dict[str, Any], conn: Connection) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS) of the named query, run in `conn`: the plan's lines (benchmarks)."""
    return list(conn.execute(text("EXPLAIN (ANALYZE, BUFFERS) " + query(name).text), params).scalars().all())


# -- many rows at once ----------------------------------------------------------------------------
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
_RETURNING = re.compile(r"\bRETURNING\b", re.I)


@functools.cache
def bulk_statement(name: str) -> tuple[str, str, frozenset[str]]:
    """(statement with `VALUES %s`, row template, field names) of a bulk query: its text holds
    one row, `VALUES (%(field)s, …)`, which becomes the template of every row."""
    sql = query(name).text
    start = re.search(r"\bVALUES\s*\(", sql, re.I)
    if start is None:
        raise ValueError(f"sql/queries/{name}.sql has no `VALUES (%(field)s, …)` row for db.bulk")
    i, depth = start.end() - 1, 0
    while i < len(sql):
        placeholder = _PLACEHOLDER.match(sql, i)
        if placeholder:  # its parentheses are not the row's
            i = placeholder.end()
            continue
        depth += {"(": 1, ")": -1}.get(sql[i], 0)
        i += 1
        if depth == 0:
            break
    template = sql[start.end() - 1:i]
    names = frozenset(_PLACEHOLDER.findall(template))
    if depth or not names:
        raise ValueError(f"sql/queries/{name}.sql: its VALUES row must be `(%(field)s, …)` (named placeholders)")
    return sql[:start.end() - 1] + "%s" + sql[i:], template, names


def _as_mapping(row: Any) -> Mapping[str, Any]:
    if isinstance(row, Mapping):
        return row
    if dataclasses.is_dataclass(row) and not isinstance(row, type):
        return {f.name: getattr(row, f.name) for f in dataclasses.fields(row)}  # shallow, unlike asdict
    if isinstance(row, tuple) and hasattr(row, "_asdict"):
        fields: Mapping[str, Any] = row._asdict()
        return fields
    raise TypeError(f"db.bulk takes rows with named fields (dict, dataclass, NamedTuple), not {type(row).__name__}")


def bulk(name: str, rows: Iterable[Any], conn: Connection | None = None,
         page_size: int = 10_000) -> list[tuple[Any, ...]]:
    """Run the named query for many rows, a page of them per statement; the rows of its RETURNING
    (in the order of `rows`), else []. Each row has named fields (a dict, a dataclass, a
    NamedTuple; extra fields are ignored) that fill the query's `VALUES (%(field)s, …)` row.
    In `conn`'s transaction, else in one of its own.

    psycopg2's execute_values with the named row as its template: one round trip per page, where
    an executemany (SQLAlchemy's, for a text statement) makes one per row."""
    from psycopg2.extras import execute_values

    sql, template, names = bulk_statement(name)
    mapped = [_as_mapping(r) for r in rows]
    for n, r in enumerate(mapped):
        if not names <= r.keys():
            raise ValueError(f"db.bulk({name!r}): row {n} lacks {', '.join(sorted(names - r.keys()))} "
                             f"(it has {', '.join(sorted(r.keys())) or 'no fields'})")
    if not mapped:
        return []
    if conn is None:
        with transaction() as own:
            return bulk(name, mapped, own, page_size)
    check_outage()
    cur = conn.connection.cursor()
    returned: list[tuple[Any, ...]] = execute_values(cur, sql, mapped, template=template, page_size=page_size,
                                                     fetch=bool(_RETURNING.search(sql)))
    return returned


def connection_url(on: Engine | None = None) -> str:
    """The SQLAlchemy URL (password included) of the process's database or of engine `on`, for
    libraries that build their own engine (Great Expectations' data source)."""
    return (on or engine()).url.render_as_string(hide_password=False)
