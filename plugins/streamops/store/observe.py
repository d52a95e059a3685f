"""Reads for observability (the `/metrics` exporter, the Streams page, `streamops status`): engines
of their own, and a deadline on every read.

They must answer while PostgreSQL is in trouble, which is when one looks at them. The process's
engine (`db.engine()`) waits up to 10 s to connect and 300 s for a statement, and its pool is
the supervisor's: a locked table hung `/metrics` and the page for over 20 s, and scrapes queued
on the supervisor's connections. Here a connection is `streamops_observer`'s, which may read
what these show and write nothing (store/roles.py), and read-only. A server that is stopped
(SIGSTOP) or cut off never sends a cancellation, so `within` also gives up on the client side.

- `engine()`, for `/metrics` and `status`: connects within `STREAMOPS_OBSERVE_TIMEOUT_S` (3 s)
  and cancels a statement or a lock wait after as long, from a pool of 2 that a caller waits the
  same time for.
- `page_engine()`, for the Streams page: a lock wait ends as soon (a locked table is a 503
  within 3 s, SQLSTATE 55P03), but a statement, a connection and the pool get
  `STREAMOPS_PAGE_TIMEOUT_S` (10 s), which is also the wall-clock deadline the page puts on each
  read (ui/app.py): a loaded machine's slow read still answers, a stopped server is a 503 within
  it. Its pool is the page's alone: the page, its JSON and each app's sparkline read at once.
"""

from __future__ import annotations

import functools
import math
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Engine, Row, create_engine
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from streamops.store import db, roles

URL_ENV = "STREAMOPS_OBSERVE_DATABASE_URL"
TIMEOUT_ENV = "STREAMOPS_OBSERVE_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 3.0
POOL_SIZE = 2  # the exporter reads with one (single flight); a second for a `streamops metrics` beside it
PAGE_TIMEOUT_ENV = "STREAMOPS_PAGE_TIMEOUT_S"
DEFAULT_PAGE_TIMEOUT_S = 10.0
# The page, its JSON poll and two sparklines at once per viewer; a read the deadline gave up on
# keeps its connection until the server answers (or `page_timeout_s` cancels it), and the pool's
# size bounds how many do.
PAGE_POOL_SIZE, PAGE_MAX_OVERFLOW = 4, 4

T = TypeVar("T")


class NotAnswering(db.DatabaseUnavailable):
    """The database did not answer a read within its deadline."""


# What "the database is not answering" is: refused, cut, timed out, cancelled, no pooled
# connection free in time, no answer at all. Not a ProgrammingError: that is a bug to see whole.
NOT_ANSWERING = (OperationalError, InterfaceError, PoolTimeout, NotAnswering)


def timeout_s() -> float:
    return float(os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_S)


def page_timeout_s() -> float:
    return float(os.environ.get(PAGE_TIMEOUT_ENV) or DEFAULT_PAGE_TIMEOUT_S)


def connect_args(statement_s: float | None = None) -> dict[str, Any]:
    """db.connect_args() with this module's limits: a lock waited for at most `timeout_s()`, a
    statement and a connection at most `statement_s` (default: the same). libpq's connect_timeout
    is whole seconds, at least 2."""
    lock_ms = int(timeout_s() * 1000)
    t = timeout_s() if statement_s is None else statement_s
    options = (f"-c statement_timeout={int(t * 1000)} -c lock_timeout={lock_ms} "
               "-c default_transaction_read_only=on")
    return {**db.connect_args(), "connect_timeout": max(2, math.ceil(t)), "options": options}


def database_url() -> str:
    """`STREAMOPS_OBSERVE_DATABASE_URL`; else the process's database as `streamops_observer`
    (roles.py) when its URL takes passwords from a password file, as the embedded cluster's
    does; else the process's URL itself: a server whose administrator gave no observer URL."""
    url = os.environ.get(URL_ENV)
    if url:
        return url
    url = db.database_url()
    return roles.as_role(url, roles.OBSERVER) if roles.names_passfile(url) else url


def engine() -> Engine:
    """The observability engine of this process's database."""
    return _engine(database_url())


def page_engine() -> Engine:
    """The Streams page's: the observer's role, a lock waited for `timeout_s()`, a statement, a
    connection and a free pooled one `page_timeout_s()` (ui/app.py puts that deadline on each read)."""
    return _engine(database_url(), page=True)


@functools.cache
def _engine(url: str, page: bool = False) -> Engine:
    if page:
        return create_engine(db.sqlalchemy_url(url), pool_pre_ping=True, pool_size=PAGE_POOL_SIZE,
                             max_overflow=PAGE_MAX_OVERFLOW, pool_timeout=page_timeout_s(),
                             connect_args=connect_args(page_timeout_s()))
    return create_engine(db.sqlalchemy_url(url), pool_pre_ping=True, pool_size=POOL_SIZE, max_overflow=0,
                         pool_timeout=timeout_s(), connect_args=connect_args())


def rows(name: str, **params: Any) -> list[Row[Any]]:
    """Every row of the named query, on the observability engine."""
    with db.connection(engine()) as conn:
        return list(conn.execute(db.query(name), params).all())


def row(name: str, **params: Any) -> Row[Any] | None:
    """The first row of the named query, or None, on the observability engine."""
    with db.connection(engine()) as conn:
        return conn.execute(db.query(name), params).first()


def within(read: Callable[[], T], deadline_s: float | None = None) -> T:
    """`read()`, or NotAnswering once `deadline_s` (STREAMOPS_OBSERVE_TIMEOUT_S) has passed. The
    read goes on in a daemon thread that ends when the server answers or the connection fails;
    the pool's size bounds how many such threads hold a connection."""
    limit = deadline_s if deadline_s is not None else timeout_s()
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = read()
        except BaseException as e:  # handed to the caller, whatever it is
            out["error"] = e

    worker = threading.Thread(target=run, name="streamops-observe-read", daemon=True)
    worker.start()
    worker.join(limit)
    if worker.is_alive():
        raise NotAnswering(f"no answer within {limit:g} s")
    if "error" in out:
        raise out["error"]
    value: T = out["value"]
    return value


def reason(e: BaseException) -> str:
    """One line saying why a read failed: the driver's message, not SQLAlchemy's wrapping."""
    text = str(getattr(e, "orig", None) or e).strip()
    first = text.splitlines()[0].strip() if text else type(e).__name__
    return first if len(first) <= 200 else first[:199] + "…"
