"""The input record contract: which raw lines are records, and why the others are not.

One pure function, `check_line`, decides for every input line of every workload: a typed record,
or a reason. The stage drivers run it inside Spark (spark_apps/workloads/parse.py), the
generator uses it for its ground truth, and the tests use it as the oracle, so the three can
never disagree about what counts. The reasons are listed in docs/input.md.

Strict by design: a field of the wrong JSON type is refused, not coerced; so are duplicate keys,
NaN, trailing text after the object, lone surrogates and NUL characters, none of which
PostgreSQL (or a second JSON reader) would treat the same way.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

# field → type, per record family. "timestamp" is an ISO 8601 string with a time zone;
# "double" accepts JSON integers too; "int" is a JSON integer within 32 bits.
FIELDS: dict[str, dict[str, str]] = {
    "web": {"id": "string", "ts": "timestamp", "ip": "string", "url": "string", "status": "int",
            "user": "string", "words": "string"},
    "taxi": {"id": "string", "ts": "timestamp", "medallion": "string", "pickup_ts": "timestamp",
             "dropoff_ts": "timestamp", "pickup_lon": "double", "pickup_lat": "double",
             "dropoff_lon": "double", "dropoff_lat": "double", "fare": "double"},
    "patterns": {"id": "string", "ts": "timestamp", "user": "string", "pattern": "string"},
}

# Values the workloads compute with must stay where the arithmetic is defined: Spark runs in ANSI
# mode, where a cell index of a longitude of 1e300 overflows and fails the batch, every time.
RANGES: dict[str, dict[str, tuple[float, float]]] = {
    "taxi": {"pickup_lon": (-180.0, 180.0), "dropoff_lon": (-180.0, 180.0),
             "pickup_lat": (-90.0, 90.0), "dropoff_lat": (-90.0, 90.0)},
}
# Event times: Spark's first watermark is the epoch, so an event before 1970 is late and dropped
# from windowed aggregates; windows near year 9999 leave the calendar.
TS_RANGE = (datetime(1970, 1, 1, tzinfo=timezone.utc), datetime(2200, 1, 1, tzinfo=timezone.utc))

# The DEBS 2015 grid the taxi workload counts routes on: 500 m cells from this corner. A domain
# fact of the workload, which the generator also draws its trips on.
TAXI_LON_MIN, TAXI_LON_MAX = -74.05, -73.75
TAXI_LAT_MIN, TAXI_LAT_MAX = 40.60, 40.90
CELL_LON_DEG = 0.005986  # 500 m east-west at NYC latitude
CELL_LAT_DEG = 0.004491556  # 500 m north-south

# A line longer than this is refused before it is parsed (the stage's `source.max_record_bytes`).
MAX_RECORD_BYTES = 1 << 20

# Reason kinds, in the order they are checked: the first that applies is the one reported.
REASON_KINDS = ("empty line", "too large", "invalid UTF-8", "NUL byte", "malformed JSON", "not a JSON object",
                "empty JSON object", "missing field", "wrong type", "out of range", "unreadable")
# "unreadable": the check itself failed on the line (a bug in this module, not in the input). The line
# is quarantined with the error instead of failing its whole batch: check_line never raises.
# A whole batch quarantined after failing the same way again and again (agent/poison.py).
BATCH_FAILED = "batch failed"

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_INT32 = (-(1 << 31), (1 << 31) - 1)


@dataclass(frozen=True)
class Verdict:
    """A record (field → typed value) or why the line is not one (`kind`, `reason`). A line
    refused for some of its fields keeps the others in `partial`, for the data-quality suites
    (which field was it?); nothing counts a partial record."""

    record: dict[str, Any] | None = None
    kind: str | None = None
    reason: str | None = None
    partial: dict[str, Any] | None = None

    @property
    def valid(self) -> bool:
        return self.record is not None


def _refuse(kind: str, detail: str = "") -> Verdict:
    return Verdict(kind=kind, reason=f"{kind}: {detail}" if detail else kind)


def excerpt(value: Any, limit: int = 40) -> str:
    """A short, printable rendering of a value for a reason text (never a NUL, never long)."""
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _NotJSON(ValueError):
    pass


def _no_constants(name: str) -> Any:
    raise _NotJSON(f"{name} is not JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _NotJSON(f"duplicate key {excerpt(k)}")
            seen.add(k)
    return obj


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _has_lone_surrogate(s: str) -> bool:
    try:
        s.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def _typed(name: str, typ: str, value: Any) -> tuple[Any, str | None, str]:
    """(typed value, None, "") or (None, reason kind, detail)."""
    if typ in ("string", "timestamp"):
        return _typed_text(name, typ, value)
    if typ == "int":
        return _typed_int(name, value)
    if typ == "double":
        return _typed_double(name, value)
    raise ValueError(f"unknown field type {typ!r}")


def _typed_text(name: str, typ: str, value: Any) -> tuple[Any, str | None, str]:
    if not isinstance(value, str):
        return None, "wrong type", f"{name} is {_json_type(value)}"
    if "\x00" in value:
        return None, "NUL byte", f"in field {name}"
    if _has_lone_surrogate(value):
        return None, "invalid UTF-8", f"{name} holds a lone surrogate"
    if typ == "string":
        return value, None, ""
    try:
        ts = datetime.fromisoformat(value)
    except ValueError:
        ts = None
    if ts is None or ts.tzinfo is None:
        return None, "wrong type", f"{name} is not an ISO 8601 timestamp with a time zone ({excerpt(value)})"
    try:
        ts = ts.astimezone(timezone.utc)
    except OverflowError:  # year 1 or 9999 with an offset that leaves the calendar
        ts = None
    if ts is None or not TS_RANGE[0] <= ts < TS_RANGE[1]:
        return None, "out of range", \
            f"{name} is {excerpt(value)}, outside [{TS_RANGE[0]:%Y-%m-%d}, {TS_RANGE[1]:%Y-%m-%d})"
    return ts, None, ""


def _typed_int(name: str, value: Any) -> tuple[Any, str | None, str]:
    if isinstance(value, float):
        return None, "wrong type", f"{name} is not an integer ({excerpt(value)})"
    if isinstance(value, bool) or not isinstance(value, int):
        return None, "wrong type", f"{name} is {_json_type(value)}"
    if not _INT32[0] <= value <= _INT32[1]:
        return None, "out of range", f"{name} is {excerpt(value)}, outside 32-bit integers"
    return value, None, ""


def _typed_double(name: str, value: Any) -> tuple[Any, str | None, str]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, "wrong type", f"{name} is {_json_type(value)}"
    try:
        f = float(value)
    except OverflowError:
        f = math.inf
    if not math.isfinite(f):
        return None, "out of range", f"{name} is not a finite number"
    return f, None, ""


def check_line(family: str, raw: bytes, max_bytes: int = MAX_RECORD_BYTES) -> Verdict:
    """The verdict on one input line (without its line terminator). Total: it never raises, so
    one line can never fail the batch (or the driver's whole-batch quarantine) it is in."""
    try:
        return _check_line(family, raw, max_bytes)
    except Exception as e:  # noqa: BLE001 - any error is a reason, never a failed batch
        return _refuse("unreadable", f"{type(e).__name__}: {excerpt(str(e), 200)}")


def _json_object(raw: bytes, max_bytes: int) -> dict[str, Any] | Verdict:
    """The line as a non-empty JSON object, or the verdict refusing it."""
    if len(raw) > max_bytes:
        return _refuse("too large", f"{len(raw)} bytes (limit {max_bytes})")
    if not raw.strip():
        return _refuse("empty line")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return _refuse("invalid UTF-8", f"byte 0x{raw[e.start]:02x} at offset {e.start}")
    nul = raw.find(b"\x00")
    if nul >= 0:
        return _refuse("NUL byte", f"at offset {nul}")
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except _NotJSON as e:
        return _refuse("malformed JSON", str(e))
    except json.JSONDecodeError as e:
        return _refuse("malformed JSON", f"{e.msg} at char {e.pos}")
    except RecursionError:
        return _refuse("malformed JSON", "nested too deeply")
    except ValueError as e:  # an integer of thousands of digits
        return _refuse("malformed JSON", str(e)[:80])
    if not isinstance(obj, dict):
        return _refuse("not a JSON object", _json_type(obj))
    if not obj:
        return _refuse("empty JSON object")
    return obj


def _check_line(family: str, raw: bytes, max_bytes: int) -> Verdict:
    fields = FIELDS[family]
    obj = _json_object(raw, max_bytes)
    if isinstance(obj, Verdict):
        return obj
    missing = [f for f in fields if f not in obj]
    if missing:
        return Verdict(kind="missing field",
                       reason=f"missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    # Every field is checked, so one reason names every bad field. A NUL or a lone surrogate
    # outranks a wrong type: it says the most about the line.
    record: dict[str, Any] = {}
    problems: dict[str, list[str]] = {}
    ranges = RANGES.get(family, {})
    for name, typ in fields.items():
        value, kind, detail = _typed(name, typ, obj[name])
        if kind is None and name in ranges and not ranges[name][0] <= value <= ranges[name][1]:
            lo, hi = ranges[name]
            kind, detail = "out of range", f"{name} is {excerpt(value)}, outside [{lo:g}, {hi:g}]"
        if kind:
            problems.setdefault(kind, []).append(detail)
        record[name] = value
    for kind in ("NUL byte", "invalid UTF-8", "wrong type", "out of range"):
        if kind in problems:
            return Verdict(kind=kind, reason=f"{kind}: {'; '.join(problems[kind])}", partial=record)
    return Verdict(record=record)


def epoch_micros(ts: datetime) -> int:
    return (ts - _EPOCH) // timedelta(microseconds=1)


def udf_row(family: str, raw: bytes | None, size: int, max_bytes: int = MAX_RECORD_BYTES) -> tuple[Any, ...]:
    """`check_line` as a flat row for Spark: (kind, reason, *fields), timestamps as epoch
    microseconds. `raw` is None for a line over the limit (it is not shipped to Python)."""
    fields = FIELDS[family]
    if raw is None:
        v = _refuse("too large", f"{size} bytes (limit {max_bytes})")
    else:
        v = check_line(family, bytes(raw), max_bytes)
    values = v.record or v.partial or {}
    return (v.kind, v.reason, *(None if values.get(f) is None else
                                epoch_micros(values[f]) if t == "timestamp" else values[f]
                                for f, t in fields.items()))
