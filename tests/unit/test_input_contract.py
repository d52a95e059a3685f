"""The input record contract (streamops.records) and the sinks' text guards: pure, no database.

The table below is the contract written down: every reason a line can be quarantined for, with
the line that earns it. docs/input.md lists the same reasons."""

from __future__ import annotations

import hashlib
import json
import math
import os
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamops.agent.sinks import KEY_MAX_BYTES, pg_json, pg_key, pg_text, quarantine_values, record_key
from streamops.generator import SCHEMAS
from streamops.records import REASON_KINDS, RecordSchema, SchemaError, check_line, udf_row

WEB = {"id": "r-1", "ts": "2026-11-21T12:00:00.016Z", "ip": "10.0.0.1", "url": "/a", "status": 200, "user": "u1",
       "words": "hello world"}


def web(**changes) -> bytes:
    rec = {**WEB, **changes}
    return json.dumps({k: v for k, v in rec.items() if v is not ...}).encode()


@pytest.mark.parametrize("line,kind,reason", [
    (b"", "empty line", "empty line"),
    (b"   \t", "empty line", "empty line"),
    (b"x" * 65, "too large", "too large: 65 bytes (limit 64)"),
    (web(words="caf").replace(b'"caf"', b'"caf\xc3\x28"'), "invalid UTF-8", "invalid UTF-8: byte 0xc3 at offset"),
    (web(words="a\x00b").replace(b"\\u0000", b"\x00"), "NUL byte", "NUL byte: at offset"),
    (web(words="a\x00b"), "NUL byte", "NUL byte: in field words"),
    (web(words="a\ud800b"), "invalid UTF-8", "invalid UTF-8: words holds a lone surrogate"),
    (b'{"id": "a"', "malformed JSON", "malformed JSON: Expecting"),
    (web() + b" trailing", "malformed JSON", "malformed JSON: Extra data at char"),
    (web() + web(), "malformed JSON", "malformed JSON: Extra data"),
    (b'{"id": "a", "id": "b"}', "malformed JSON", 'malformed JSON: duplicate key "id"'),
    (b'{"id": NaN}', "malformed JSON", "malformed JSON: NaN is not JSON"),
    (b"[" * 50_000, "malformed JSON", "malformed JSON"),
    (b"[1,2,3]", "not a JSON object", "not a JSON object: an array"),
    (b'"text"', "not a JSON object", "not a JSON object: a string"),
    (b"null", "not a JSON object", "not a JSON object: null"),
    (b"{}", "empty JSON object", "empty JSON object"),
    (web(words=...), "missing field", "missing field words"),
    (web(ip=..., url=...), "missing field", "missing fields ip, url"),
    (web(words=12345), "wrong type", "wrong type: words is a number"),
    (web(words=None), "wrong type", "wrong type: words is null"),
    (web(words=["a"]), "wrong type", "wrong type: words is an array"),
    (web(status="200"), "wrong type", "wrong type: status is a string"),
    (web(status=200.5), "wrong type", "wrong type: status is not an integer (200.5)"),
    (web(status=True), "wrong type", "wrong type: status is a boolean"),
    (web(ts=1763726400000), "wrong type", "wrong type: ts is a number"),
    (web(ts="yesterday"), "wrong type", 'wrong type: ts is not an ISO 8601 timestamp with a time zone ("yesterday")'),
    (web(ts="2026-11-21T12:00:00"), "wrong type", "wrong type: ts is not an ISO 8601 timestamp with a time zone"),
    (web(status=1 << 40, words=1), "wrong type", "wrong type: words is a number"),
    (web(status=1 << 40), "out of range", "out of range: status is 1099511627776, outside 32-bit integers"),
    (web(ts="0001-01-01T00:00:00Z"), "out of range", "out of range: ts is"),
    # an offset that moves the instant off the calendar (astimezone raised OverflowError here once)
    (web(ts="0001-01-01T00:00:00+23:59"), "out of range", 'out of range: ts is "0001-01-01T00:00:00+23:59"'),
    (web(ts="9999-12-31T23:59:59-23:59"), "out of range", 'out of range: ts is "9999-12-31T23:59:59-23:59"'),
])
def test_every_reason_a_line_is_refused_for(line, kind, reason):
    v = check_line(SCHEMAS["web"], line, max_bytes=64 if kind == "too large" else 1 << 20)
    assert not v.valid
    assert v.kind == kind and v.kind in REASON_KINDS
    assert v.reason.startswith(reason), v.reason


def test_a_valid_line_is_typed():
    v = check_line(SCHEMAS["web"], web())
    assert v.valid and v.record["status"] == 200 and v.record["ts"].year == 2026 and v.record["ts"].tzinfo


def test_taxi_coordinates_must_be_on_the_globe():
    taxi = {"id": "t", "ts": "2026-11-21T12:00:00Z", "medallion": "m", "pickup_ts": "2026-11-21T12:00:00Z",
            "dropoff_ts": "2026-11-21T12:10:00Z", "pickup_lon": -73.98, "pickup_lat": 40.75, "dropoff_lon": -73.95,
            "dropoff_lat": 40.77, "fare": 12}
    assert check_line(SCHEMAS["taxi"], json.dumps(taxi).encode()).record["fare"] == 12.0
    # 1e300 would overflow the grid cell in ANSI Spark and fail the batch on every replay
    v = check_line(SCHEMAS["taxi"], json.dumps({**taxi, "pickup_lon": 1e300}).encode())
    assert v.kind == "out of range" and "pickup_lon" in v.reason


def test_udf_row_never_ships_a_line_over_the_limit():
    assert udf_row(SCHEMAS["web"], None, 5 << 20)[:2] == ("too large", "too large: 5242880 bytes (limit 1048576)")
    row = udf_row(SCHEMAS["web"], web(), len(web()))
    assert row[0] is None and row[2] == "r-1" and row[3] == 1795262400016000  # ts in epoch microseconds


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(sorted(SCHEMAS)), line=st.binary(max_size=300) | json_values.map(
    lambda v: json.dumps(v).encode()))
def test_check_line_never_raises_and_always_says_why(family, line):
    v = check_line(SCHEMAS[family], line)
    assert v.valid != (v.reason is not None)
    if not v.valid:
        assert v.kind in REASON_KINDS and v.reason.startswith(v.kind.split(" ")[0])
        assert "\x00" not in v.reason and len(v.reason) < 600


def test_a_check_that_breaks_is_a_reason_not_an_exception():
    v = check_line(SCHEMAS["web"], None)  # not bytes: the check itself fails
    assert v.kind == "unreadable" and v.reason.startswith("unreadable: TypeError")


# The fuzz tier: `make test-fuzz` sets STREAMOPS_FUZZ_EXAMPLES to 20 000 (per family); `make test`
# runs a few hundred. Timestamps at the calendar's ends with extreme offsets, any field of any type.
FUZZ = settings(max_examples=int(os.environ.get("STREAMOPS_FUZZ_EXAMPLES", 300)), deadline=None,
                suppress_health_check=list(HealthCheck))
timestamps = st.builds(
    lambda dt, sign, hh, mm, sep, frac: dt.strftime(f"%Y-%m-%d{sep}%H:%M:%S") + frac + f"{sign}{hh:02d}:{mm:02d}",
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59))
    | st.datetimes(max_value=datetime(1, 1, 2)) | st.datetimes(min_value=datetime(9999, 12, 30)),  # the calendar's ends
    st.sampled_from("+-"), st.integers(0, 23), st.integers(0, 59), st.sampled_from("T "),
    st.sampled_from(["", ".5", ".123456"])) | st.sampled_from(["Z", "+00:00", "0001-01-01", "9999-12-31T24:00:00Z"])


def _records(family: str):
    def value(typ: str):
        typed = {"timestamp": timestamps, "string": st.text(max_size=20), "int": st.integers(),
                 "double": st.floats() | st.integers()}[typ]
        return typed | json_values
    return st.fixed_dictionaries({name: value(typ) for name, typ in SCHEMAS[family].fields})


@pytest.mark.parametrize("family", sorted(SCHEMAS))
def test_fuzz_any_record_of_a_family_gets_a_verdict(family):
    @FUZZ
    @given(rec=_records(family))
    def prop(rec):
        line = json.dumps(rec, allow_nan=True).encode()
        v = check_line(SCHEMAS[family], line)
        assert v.valid != (v.reason is not None)
        assert v.kind != "unreadable", v.reason  # every failure of the check is a case it should name
        if not v.valid:
            assert v.kind in REASON_KINDS and v.reason.startswith(v.kind.split(" ")[0])
    prop()


@settings(max_examples=300)
@given(st.text())
def test_text_guards_make_any_string_storable(s):
    out = pg_text(s)
    assert "\x00" not in out
    out.encode("utf-8")  # no lone surrogates left
    key = pg_key(s)
    assert len(key.encode("utf-8")) <= KEY_MAX_BYTES
    # `s` as a key too, one level down: at the top level s == "k" would overwrite the value checked.
    doc = json.dumps({"k": s, "as_key": {s: [s]}}, ensure_ascii=True)
    assert "\\u0000" not in pg_json(doc).replace("\\\\", "")
    assert json.loads(pg_json(doc))["k"] == pg_text(s)
    assert json.loads(pg_json(doc))["as_key"] == {pg_text(s): [pg_text(s)]}


def test_long_keys_stay_unique():
    a, b = "x" * 5000 + "a", "x" * 5000 + "b"
    assert pg_key(a) != pg_key(b) and pg_key("short") == "short"


def test_quarantine_rows_keep_the_exact_bytes_when_text_cannot():
    clean = quarantine_values("s", 1, 0, "/in/f", b'{"a": 1}', "k", "wrong type", "why")
    assert clean[5] == '{"a": 1}' and clean[6] is None and clean[7] == 8
    dirty = quarantine_values("s", 1, 0, "/in/f", b"a\x00b\xff", "k", "NUL byte", "why")
    assert "\x00" not in dirty[5] and dirty[6] == b"a\x00b\xff" and dirty[7] == 4


def test_record_key_is_the_md5_spark_computes_and_counts_equal_lines():
    raw = b"bad line"
    base = hashlib.md5(b"/in/f\n" + raw).hexdigest()
    assert record_key("/in/f", raw) == base and record_key("/in/f", raw, 2) == f"{base}:2"
    assert not math.isnan(len(base))


# -- declared schemas (issue 43): any columns, json, csv and text lines ----------------------------------
CLICKS = RecordSchema.of("user STRING, n BIGINT, ok BOOLEAN, ts TIMESTAMP", ranges={"n": (0, 10)})


@pytest.mark.parametrize("fmt, line, want", [
    ("json", b'{"user": "u", "n": 3, "ok": true, "ts": "2026-01-01T00:00:00Z"}', None),
    ("json", b'{"user": "u", "n": 3, "ok": "yes", "ts": "2026-01-01T00:00:00Z"}', "wrong type"),
    ("json", b'{"user": "u", "n": 11, "ok": true, "ts": "2026-01-01T00:00:00Z"}', "out of range"),
    ("json", b'{"user": "u", "n": 3, "ts": "2026-01-01T00:00:00Z"}', "missing field"),
    ("csv", b'u,3,true,2026-01-01T00:00:00Z', None),
    ("csv", b'"u, with a comma",3,false,2026-01-01T00:00:00Z', None),
    ("csv", b'u,three,true,2026-01-01T00:00:00Z', "wrong type"),
    ("csv", b'u,3.5,true,2026-01-01T00:00:00Z', "wrong type"),
    ("csv", b'u,3,true', "missing field"),
    ("csv", b'u,,true,2026-01-01T00:00:00Z', "missing field"),
    ("csv", b'u,3,true,2026-01-01T00:00:00Z,extra', "malformed CSV"),
    ("csv", b'u,"3,true,2026', "malformed CSV"),
    ("csv", b'\xff,3,true,x', "invalid UTF-8"),
])
def test_a_declared_schema_is_checked_in_its_format(fmt, line, want):
    v = check_line(RecordSchema.of(CLICKS.ddl, fmt, {"n": (0, 10)}), line)
    assert v.kind == want, v.reason
    if want is None:
        assert v.record["n"] == 3 and v.record["user"].startswith("u") and v.record["ts"].year == 2026


def test_a_text_source_takes_the_line_itself():
    schema = RecordSchema.of("line STRING", "text")
    assert check_line(schema, b"GET /index.html 200").record == {"line": "GET /index.html 200"}
    assert check_line(schema, b"a\x00b").kind == "NUL byte"
    assert check_line(schema, b"   ").kind == "empty line"
    with pytest.raises(SchemaError, match="one STRING column"):
        RecordSchema.of("line STRING, n INT", "text")


@pytest.mark.parametrize("ddl, why", [
    ("user STRING, ts TIMESTMP", "type 'TIMESTMP' is not supported"),
    ("user STRING, user INT", "declared twice"),
    ("user", "expected 'name TYPE'"),
    ("tags ARRAY<STRING>", "not supported"),
])
def test_a_bad_schema_says_which_column(ddl, why):
    with pytest.raises(SchemaError, match=why):
        RecordSchema.of(ddl)


def test_the_generators_kinds_are_declared_schemas_and_any_schema_gets_sample_lines():
    import random
    from datetime import datetime

    from streamops.generator import kind_for, sample_lines

    assert kind_for(SCHEMAS["taxi"]) == "taxi" and kind_for(CLICKS) is None
    t = datetime(2026, 1, 1, tzinfo=UTC)
    for fmt in ("json", "csv"):
        schema = RecordSchema.of(CLICKS.ddl, fmt, {"n": (0, 10)})
        lines = sample_lines(schema, 50, rng=random.Random(1), ts_from=t, ts_to=t.replace(minute=1))
        assert all(check_line(schema, ln.encode()).valid for ln in lines), fmt
