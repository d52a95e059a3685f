"""The input record contract: which raw lines are records, and why the others are not.

One pure function, `check_line`, decides for every input line of every stage: a record of the
stage's declared schema (`RecordSchema`, from apps.yaml's `source.schema`), or a reason. The
stage drivers run it inside Spark (spark_apps/parse.py), the generator uses it for its ground
truth, and the tests use it as the oracle, so the three can never disagree about what counts.
The reasons are listed in docs/input.md.

Strict by design: a field of the wrong JSON type is refused, not coerced; so are duplicate keys,
NaN, trailing text after the object, lone surrogates and NUL characters, none of which
PostgreSQL (or a second JSON reader) would treat the same way.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

# Field types a declared schema may use (Spark DDL names → the contract's names). "timestamp" is
# an ISO 8601 string with a time zone; "double" accepts JSON integers too; "int" and "bigint" are
# JSON integers within 32 and 64 bits. Nested types are not records a line can be checked against.
DDL_TYPES: dict[str, str] = {"STRING": "string", "TIMESTAMP": "timestamp", "INT": "int", "INTEGER": "int",
                             "BIGINT": "bigint", "LONG": "bigint", "DOUBLE": "double", "FLOAT": "double",
                             "BOOLEAN": "boolean"}
FORMATS = ("json", "csv", "text", "parquet")

# Event times: Spark's first watermark is the epoch, so an event before 1970 is late and dropped
# from windowed aggregates; windows near year 9999 leave the calendar.
TS_RANGE = (datetime(1970, 1, 1, tzinfo=UTC), datetime(2200, 1, 1, tzinfo=UTC))


class SchemaError(ValueError):
    """A declared schema that is not a flat list of `name TYPE` of the supported types."""


def parse_ddl(ddl: str) -> tuple[tuple[str, str], ...]:
    """`"user STRING, ts TIMESTAMP"` → (("user", "string"), ("ts", "timestamp")). Hand-written: the
    control plane validates apps.yaml without a JVM, and only flat schemas are records here."""
    fields: list[tuple[str, str]] = []
    for i, part in enumerate(p.strip() for p in ddl.split(",")):
        words = part.replace("`", "").split()
        if len(words) != 2:
            raise SchemaError(f"column {i + 1} ({part!r}): expected 'name TYPE'")
        name, typ = words[0], words[1].upper()
        if typ not in DDL_TYPES:
            raise SchemaError(f"column {name!r}: type {words[1]!r} is not supported; expected one of "
                              f"{', '.join(sorted(set(DDL_TYPES)))}")
        if name in dict(fields):
            raise SchemaError(f"column {name!r} is declared twice")
        fields.append((name, DDL_TYPES[typ]))
    if not fields:
        raise SchemaError("a schema needs at least one column")
    return tuple(fields)


@dataclass(frozen=True)
class RecordSchema:
    """What a record of a stage's input is: its columns (name, type) in order, the line format,
    and the ranges numeric columns must stay within (the job computes with them: Spark runs in
    ANSI mode, where an overflow fails the batch every time)."""

    fields: tuple[tuple[str, str], ...]
    format: str = "json"
    ranges: tuple[tuple[str, float, float], ...] = ()

    @classmethod
    def of(cls, ddl: str, format: str = "json", ranges: dict[str, tuple[float, float]] | None = None) -> RecordSchema:
        fields = parse_ddl(ddl)
        if format not in FORMATS:
            raise SchemaError(f"format {format!r}: expected one of {', '.join(FORMATS)}")
        if format == "text" and [t for _, t in fields] != ["string"]:
            raise SchemaError("a text source has one STRING column (the line), e.g. 'line STRING'")
        types = dict(fields)
        for name in ranges or {}:
            if types.get(name) not in ("int", "bigint", "double"):
                raise SchemaError(f"range for {name!r}: not a numeric column of the schema")
        return cls(fields, format, tuple((n, float(lo), float(hi)) for n, (lo, hi) in (ranges or {}).items()))

    @property
    def types(self) -> dict[str, str]:
        return dict(self.fields)

    @property
    def ddl(self) -> str:
        back = {v: k for k, v in reversed(DDL_TYPES.items())}
        return ", ".join(f"{n} {back[t]}" for n, t in self.fields)


# A line longer than this is refused before it is parsed (the stage's `source.max_record_bytes`).
MAX_RECORD_BYTES = 1 << 20

# Reason kinds, in the order they are checked: the first that applies is the one reported.
REASON_KINDS = ("empty line", "too large", "invalid UTF-8", "NUL byte", "malformed JSON", "malformed CSV",
                "not a JSON object", "empty JSON object", "missing field", "wrong type", "out of range", "unreadable")
# "unreadable": the check itself failed on the line (a bug in this module, not in the input). The line
# is quarantined with the error instead of failing its whole batch: check_line never raises.
# A whole batch quarantined after failing the same way again and again (agent/poison.py).
BATCH_FAILED = "batch failed"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_INT_RANGE = {"int": (-(1 << 31), (1 << 31) - 1), "bigint": (-(1 << 63), (1 << 63) - 1)}


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
    if typ in _INT_RANGE:
        return _typed_int(name, typ, value)
    if typ == "double":
        return _typed_double(name, value)
    if typ == "boolean":
        return (value, None, "") if isinstance(value, bool) else (None, "wrong type", f"{name} is {_json_type(value)}")
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
        ts = ts.astimezone(UTC)
    except OverflowError:  # year 1 or 9999 with an offset that leaves the calendar
        ts = None
    if ts is None or not TS_RANGE[0] <= ts < TS_RANGE[1]:
        return None, "out of range", \
            f"{name} is {excerpt(value)}, outside [{TS_RANGE[0]:%Y-%m-%d}, {TS_RANGE[1]:%Y-%m-%d})"
    return ts, None, ""


def _typed_int(name: str, typ: str, value: Any) -> tuple[Any, str | None, str]:
    if isinstance(value, float):
        return None, "wrong type", f"{name} is not an integer ({excerpt(value)})"
    if isinstance(value, bool) or not isinstance(value, int):
        return None, "wrong type", f"{name} is {_json_type(value)}"
    lo, hi = _INT_RANGE[typ]
    if not lo <= value <= hi:
        bits = "32" if typ == "int" else "64"
        return None, "out of range", f"{name} is {excerpt(value)}, outside {bits}-bit integers"
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


def check_line(schema: RecordSchema, raw: bytes, max_bytes: int = MAX_RECORD_BYTES) -> Verdict:
    """The verdict on one input line (without its line terminator) against the stage's declared
    schema. Total: it never raises, so one line can never fail the batch (or the driver's
    whole-batch quarantine) it is in."""
    try:
        return _check_line(schema, raw, max_bytes)
    except Exception as e:  # noqa: BLE001 - any error is a reason, never a failed batch
        return _refuse("unreadable", f"{type(e).__name__}: {excerpt(str(e), 200)}")


def _text(raw: bytes, max_bytes: int) -> str | Verdict:
    """The line as UTF-8 text without NUL, or the verdict refusing it."""
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
    return text


def _json_object(text: str) -> dict[str, Any] | Verdict:
    """The line as a non-empty JSON object, or the verdict refusing it."""
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


def _csv_cell(typ: str, cell: str) -> Any:
    """A CSV cell as the JSON value it stands for, so one typing rule serves both formats; a
    cell that is not a number of a numeric column stays text, and is then 'wrong type'."""
    if typ in ("string", "timestamp"):
        return cell
    if typ == "boolean":
        return {"true": True, "false": False}.get(cell.strip().lower(), cell)
    try:
        return int(cell) if typ in _INT_RANGE and cell.strip().lstrip("+-").isdigit() else float(cell)
    except ValueError:
        return cell


def _csv_object(schema: RecordSchema, text: str) -> dict[str, Any] | Verdict:
    try:
        cells = next(csv.reader([text], strict=True))
    except csv.Error as e:
        return _refuse("malformed CSV", str(e))
    names = [n for n, _ in schema.fields]
    if len(cells) > len(names):
        return _refuse("malformed CSV", f"{len(cells)} columns, the schema has {len(names)}")
    types = schema.types
    return {n: _csv_cell(types[n], c) for n, c in zip(names, cells, strict=False) if c != "" or types[n] == "string"}


def _check_line(schema: RecordSchema, raw: bytes, max_bytes: int) -> Verdict:
    text = _text(raw, max_bytes)
    if isinstance(text, Verdict):
        return text
    if schema.format == "text":
        return Verdict(record={schema.fields[0][0]: text})
    # parquet rows reach the check as their JSON rendering (spark_apps.parse.read_lines)
    obj = _csv_object(schema, text) if schema.format == "csv" else _json_object(text)
    if isinstance(obj, Verdict):
        return obj
    missing = [f for f, _ in schema.fields if f not in obj]
    if missing:
        return Verdict(kind="missing field",
                       reason=f"missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    # Every field is checked, so one reason names every bad field. A NUL or a lone surrogate
    # outranks a wrong type: it says the most about the line.
    record: dict[str, Any] = {}
    problems: dict[str, list[str]] = {}
    ranges = {n: (lo, hi) for n, lo, hi in schema.ranges}
    for name, typ in schema.fields:
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


def udf_row(schema: RecordSchema, raw: bytes | None, size: int, max_bytes: int = MAX_RECORD_BYTES) -> tuple[Any, ...]:
    """`check_line` as a flat row for Spark: (kind, reason, *fields), timestamps as epoch
    microseconds. `raw` is None for a line over the limit (it is not shipped to Python)."""
    if raw is None:
        v = _refuse("too large", f"{size} bytes (limit {max_bytes})")
    else:
        v = check_line(schema, bytes(raw), max_bytes)
    values = v.record or v.partial or {}
    return (v.kind, v.reason, *(None if values.get(f) is None else
                                epoch_micros(values[f]) if t == "timestamp" else values[f]
                                for f, t in schema.fields))
