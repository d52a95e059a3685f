"""Is a failure the infrastructure's (retry it; it never counts as poison) or the data's?

Decided by exception type and PostgreSQL's SQLSTATE, not by message text, wherever the type is
still there. A sink write in an executor crosses the JVM, which keeps only text: the executor's
writer (`sinks._execute_values_partition`) therefore tags a database error with its SQLSTATE
(`tag_sqlstate`), and the driver reads the tag back. What is left are Spark's own infrastructure
failures (a lost executor, a Python worker that died), recognised by the names Spark gives them.
"""

from __future__ import annotations

import re

# SQLSTATE classes and codes of failures that pass: the connection (08), resources such as a full
# disk or too many connections (53), the operator or a restart (57: admin shutdown, crash
# shutdown, cannot connect now, a statement timeout), the system (58: I/O), a rolled-back
# transaction (40: serialization, deadlock), a standby promoted late (25006: read-only
# transaction) and a lock not available (55P03).
TRANSIENT_CLASSES = ("08", "40", "53", "57", "58")
TRANSIENT_CODES = ("25006", "55P03")

_TAG = re.compile(r"streamops-sqlstate=([0-9A-Z]{5}|none)")
# What is left untyped: Spark's names for an infrastructure failure under a task, libpq's for a
# lost server (a connection error has no SQLSTATE: the server never answered), and PostgreSQL's
# for a rolled-back transaction in text that carries no tag.
_TRANSIENT_TEXT = ("ExecutorLostFailure", "FetchFailed", "Python worker exited unexpectedly",
                   "Python worker failed to connect back", "crashed)", "SparkOutOfMemoryError",
                   "java.lang.OutOfMemoryError", "No space left on device", "TaskKilled",
                   "OperationalError", "could not connect to server", "server closed the connection",
                   "Connection refused", "Connection reset", "the database system is", "terminating connection",
                   "injected database outage", "deadlock detected", "could not serialize access")


class TransientError(RuntimeError):
    """A failure streamops itself found to be the infrastructure's (staged rows a crash lost)."""


def tag_sqlstate(e: BaseException) -> str:
    """A database error's text for the trip through the JVM: its SQLSTATE, type and message."""
    return f"streamops-sqlstate={getattr(e, 'pgcode', None) or 'none'} {type(e).__name__}: {e}"


def sqlstate(e: BaseException | str) -> str | None:
    """The SQLSTATE of a psycopg2 or SQLAlchemy error, or of a tagged text; None if unknown."""
    if isinstance(e, BaseException):
        for err in (e, getattr(e, "orig", None)):
            code = getattr(err, "pgcode", None)
            if code:
                return code
        e = str(e)
    m = _TAG.search(e)
    return m.group(1) if m and m.group(1) != "none" else None


def is_transient_sqlstate(code: str | None) -> bool:
    return code is not None and (code[:2] in TRANSIENT_CLASSES or code in TRANSIENT_CODES)


def is_transient(e: BaseException | str) -> bool:
    """True for a failure of the infrastructure: worth a retry, never evidence against the data."""
    if isinstance(e, BaseException):
        import psycopg2

        orig = getattr(e, "orig", e)
        if isinstance(e, TransientError):
            return True
        if isinstance(orig, psycopg2.OperationalError) and not getattr(orig, "pgcode", None):
            return True  # the server never answered
        if isinstance(orig, (ConnectionError, TimeoutError)):
            return True
    code = sqlstate(e)
    if code is not None:
        return is_transient_sqlstate(code)
    text = str(e)
    return any(marker in text for marker in _TRANSIENT_TEXT)
