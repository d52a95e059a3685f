"""Is a failure the infrastructure's (retry it; it never counts as poison) or the data's?

Decided by exception type and PostgreSQL's SQLSTATE, not by message text, wherever the type is
still there: a Java exception by its class (and superclasses) and Spark's error condition, along
its whole cause chain (`classify`). A sink write in an executor crosses the JVM, which keeps only
text: the executor's writer (`sinks._execute_values_partition`) therefore tags a database error
with its SQLSTATE (`tag_sqlstate`), and the driver reads the tag back. What is left are Spark's
own infrastructure failures (a lost executor, a Python worker that died), recognised by the names
Spark gives them.
"""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass
from typing import Any

from streamops.agent import data_loss, state_schema

# SQLSTATE classes and codes of failures that pass: the connection (08), resources such as a full
# disk or too many connections (53), the operator or a restart (57: admin shutdown, crash
# shutdown, cannot connect now, a statement timeout), the system (58: I/O), a rolled-back
# transaction (40: serialization, deadlock), a standby promoted late (25006: read-only
# transaction) and a lock not available (55P03).
TRANSIENT_CLASSES = ("08", "40", "53", "57", "58")
TRANSIENT_CODES = ("25006", "55P03")

_TAG = re.compile(r"streamops-sqlstate=([0-9A-Z]{5}|none)")
# The fallback, only where the type is lost (an executor's error reaching the driver as text):
# Spark's names for an infrastructure failure under a task, libpq's for a lost server (a
# connection error has no SQLSTATE: the server never answered), and PostgreSQL's for a
# rolled-back transaction in text that carries no tag.
_TRANSIENT_TEXT = ("ExecutorLostFailure", "FetchFailed", "Python worker exited unexpectedly",
                   "Python worker failed to connect back", "crashed)", "SparkOutOfMemoryError",
                   "java.lang.OutOfMemoryError", "No space left on device", "TaskKilled",
                   "OperationalError", "could not connect to server", "server closed the connection",
                   "Connection refused", "Connection reset", "the database system is", "terminating connection",
                   "injected database outage", "deadlock detected", "could not serialize access")


# Java exceptions of the infrastructure: the file system (a stale NFS handle, EIO, a read-only or
# full file system, a permission taken away are all java.io.IOException subclasses there) ...
INFRA_CLASSES = ("java.io.IOException", "java.nio.file.FileSystemException",
                 "java.nio.file.ReadOnlyFileSystemException", "java.io.UncheckedIOException")
# ... but not those IOExceptions that say the bytes themselves are bad: the data's.
DATA_IO_CLASSES = ("java.util.zip.ZipException", "java.io.EOFException", "java.io.CharConversionException",
                   "java.nio.charset.CharacterCodingException", "java.io.UTFDataFormatException",
                   "com.fasterxml.jackson.core.JsonProcessingException")
# Spark's error conditions (SparkThrowable.getCondition) of the state store and the checkpoint.
INFRA_CONDITIONS = ("CANNOT_LOAD_STATE_STORE", "CANNOT_WRITE_STATE_STORE", "CONCURRENT_STREAM_LOG_UPDATE",
                    "CONCURRENT_QUERY", "STREAMING_CHECKPOINT_LOG_WRITE_FAILURE", "CANNOT_LOAD_CHECKPOINT_FILE_MANAGER")
# FileStreamSource's own check: another run writes the same checkpoint (fencing ends one of them).
CONCURRENT_LOG = ("Multiple streaming jobs detected", "Concurrent update to the log")
INFRA_ERRNOS = (errno.ESTALE, errno.EIO, errno.EROFS, errno.ENOSPC, errno.EDQUOT)


@dataclass(frozen=True)
class ErrorClass:
    kind: str   # transient (retry in place) | infrastructure (not the data's; a new run may help) | data
    #             | data_lost (a Kafka source's records deleted before they were read: no retry helps)
    #             | incompatible (the job's code cannot read the checkpoint's state: no retry helps)
    name: str   # the Java class or Spark condition, the SQLSTATE, the text marker, or the Python type

    def __str__(self) -> str:
        return f"{self.kind}: {self.name}"


@dataclass(frozen=True)
class JavaLink:
    """One exception of a Java cause chain: its class and superclasses, message and condition."""
    classes: tuple[str, ...]
    message: str = ""
    condition: str | None = None


def java_chain(e: Any, limit: int = 20) -> list[JavaLink]:
    """The Java cause chain behind `e`: a py4j Py4JJavaError (`java_exception`), a PySpark
    CapturedException (`_origin`, else its `_desc` and `_cause`: StreamingQuery.exception() keeps
    no origin of its own), or a py4j Throwable itself. Empty when `e` has no Java side."""
    out: list[JavaLink] = []
    while e is not None and len(out) < limit:
        if not isinstance(e, (BaseException, str)) and hasattr(e, "getClass"):  # first: py4j answers any name
            return out + _throwables(e, limit - len(out))
        j = getattr(e, "java_exception", None) or getattr(e, "_origin", None)
        if j is not None:
            return out + _throwables(j, limit - len(out))
        if not hasattr(e, "_desc"):
            return out
        # Throwable.toString() is "class.Name: message": the class, without its superclasses.
        name, _, message = str(e._desc).partition(": ")
        out.append(JavaLink((name,), message))
        e = getattr(e, "_cause", None)
    return out


def _throwables(t: Any, limit: int) -> list[JavaLink]:
    out: list[JavaLink] = []
    while t is not None and len(out) < limit:
        classes: list[str] = []
        c = t.getClass()
        while c is not None and len(classes) < 12:
            classes.append(str(c.getName()))
            c = c.getSuperclass()
        try:
            condition = t.getCondition() if hasattr(t, "getCondition") else None
        except Exception:  # noqa: BLE001 - py4j: not a SparkThrowable
            condition = None
        out.append(JavaLink(tuple(classes), str(t.getMessage() or ""), str(condition) if condition else None))
        t = t.getCause()
    return out


def classify_chain(chain: list[JavaLink]) -> ErrorClass | None:
    """Pure rule: the infrastructure's error in a Java cause chain, or None (no verdict)."""
    for link in chain:
        if data_loss.is_data_loss(link.condition, ""):
            return ErrorClass("data_lost", str(link.condition))
        if state_schema.is_incompatible(link.condition, ""):
            return ErrorClass("incompatible", str(link.condition))
        if link.condition and link.condition.split(".")[0] in INFRA_CONDITIONS:
            return ErrorClass("infrastructure", link.condition)
        if any(c in DATA_IO_CLASSES for c in link.classes):
            return ErrorClass("data", link.classes[0])
        if any(c in INFRA_CLASSES for c in link.classes):
            return ErrorClass("infrastructure", link.classes[0])
        if "java.lang.IllegalStateException" in link.classes and any(m in link.message for m in CONCURRENT_LOG):
            return ErrorClass("infrastructure", link.classes[0])
    return None


class TransientError(RuntimeError):
    """A failure streamops itself found to be the infrastructure's (staged rows a crash lost)."""


def tag_sqlstate(e: BaseException) -> str:
    """A database error's text for the trip through the JVM: its SQLSTATE, type and message."""
    return f"streamops-sqlstate={getattr(e, 'pgcode', None) or 'none'} {type(e).__name__}: {e}"


def sqlstate(e: Any) -> str | None:
    """The SQLSTATE of a psycopg2 or SQLAlchemy error, or of a tagged text; None if unknown."""
    if isinstance(e, BaseException):
        for err in (e, getattr(e, "orig", None)):
            code = getattr(err, "pgcode", None)
            if code:
                return str(code)
    m = _TAG.search(e if isinstance(e, str) else str(e))
    return m.group(1) if m and m.group(1) != "none" else None


def is_transient_sqlstate(code: str | None) -> bool:
    return code is not None and (code[:2] in TRANSIENT_CLASSES or code in TRANSIENT_CODES)


def is_transient(e: Any) -> bool:
    """True for a failure of the infrastructure: worth a retry, never evidence against the data."""
    return classify(e).kind in ("transient", "infrastructure")


def classify(e: Any) -> ErrorClass:
    """Whose failure `e` is: by Python type, then the Java cause chain's classes and Spark's
    conditions, then PostgreSQL's SQLSTATE, and only then text (see `_TRANSIENT_TEXT`)."""
    if isinstance(e, BaseException):
        import psycopg2

        orig = getattr(e, "orig", e)
        if isinstance(e, TransientError):
            return ErrorClass("transient", type(e).__name__)
        if isinstance(orig, psycopg2.OperationalError) and not getattr(orig, "pgcode", None):
            return ErrorClass("transient", "OperationalError")  # the server never answered
        if isinstance(orig, (ConnectionError, TimeoutError)):
            return ErrorClass("transient", type(orig).__name__)
        if isinstance(orig, OSError) and orig.errno in INFRA_ERRNOS:
            return ErrorClass("infrastructure", f"{type(orig).__name__} {errno.errorcode[orig.errno]}")
    if not isinstance(e, str) and (found := classify_chain(java_chain(e))) is not None:
        return found
    code = sqlstate(e)
    if code is not None:
        return ErrorClass("transient" if is_transient_sqlstate(code) else "data", f"SQLSTATE {code}")
    # The fallback where the type is lost (an executor's error reaches the driver as text only).
    text = str(e)
    if data_loss.is_data_loss(None, text):
        return ErrorClass("data_lost", data_loss.CONDITION)
    if state_schema.is_incompatible(None, text):
        return ErrorClass("incompatible", next(c for c in state_schema.CONDITIONS if c in text))
    marker = next((m for m in _TRANSIENT_TEXT if m in text), None)
    if marker is not None:
        return ErrorClass("transient", marker)
    return ErrorClass("data", type(e).__name__ if isinstance(e, BaseException) else "text")
