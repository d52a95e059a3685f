"""Valid sample lines of any declared schema: a warm-up's input before the stage's producers
start, and `streamops job check`'s when the stage has no input yet."""

from __future__ import annotations

import csv
import io
import random
from collections.abc import Callable
from datetime import datetime
from typing import Any

from streamops.generator.records import dumps, epoch_ms_ceil, format_ts, kind_for, make_records, record_id
from streamops.records import RecordSchema

_SCHEMA_VALUES: dict[str, Callable[[random.Random, str, int], Any]] = {
    "string": lambda rng, rid, ms: f"{rid}-{rng.randrange(1000)}",
    "timestamp": lambda rng, rid, ms: format_ts(ms),
    "int": lambda rng, rid, ms: rng.randrange(1000),
    "bigint": lambda rng, rid, ms: rng.randrange(1 << 40),
    "double": lambda rng, rid, ms: round(rng.uniform(0, 1000), 3),
    "boolean": lambda rng, rid, ms: rng.random() < 0.5,
}


def make_schema_records(schema: RecordSchema, n: int, *, rng: random.Random, start_seq: int, run: str,
                        ts_from: datetime, ts_to: datetime) -> list[dict[str, Any]]:
    """`n` records of any declared schema (a team's own job's input, for a warm-up or a check):
    every timestamp column at the record's event time, the other columns drawn by type, numbers
    within the schema's ranges."""
    lo, hi = epoch_ms_ceil(ts_from), max(epoch_ms_ceil(ts_from) + 1, epoch_ms_ceil(ts_to))
    ranges = {name: (a, b) for name, a, b in schema.ranges}
    out = []
    for j, ms in enumerate(sorted(rng.randrange(lo, hi) for _ in range(n))):
        rid = record_id(run, start_seq + j)
        rec = {name: _SCHEMA_VALUES[typ](rng, rid, ms) for name, typ in schema.fields}
        for name, (a, b) in ranges.items():
            rec[name] = rng.uniform(a, b) if schema.types[name] == "double" else int((a + b) // 2)
        out.append(rec)
    return out


def sample_lines(schema: RecordSchema, n: int, *, rng: random.Random, ts_from: datetime,
                 ts_to: datetime) -> list[str]:
    """`n` valid lines of `schema` in its format: the generator's kind when one fits, else drawn from
    the schema alone."""
    kind = kind_for(schema)
    recs = (make_records(kind, n, rng=rng, start_seq=0, run="sample", ts_from=ts_from, ts_to=ts_to) if kind
            else make_schema_records(schema, n, rng=rng, start_seq=0, run="sample", ts_from=ts_from, ts_to=ts_to))
    if schema.format in ("json", "parquet"):  # a Parquet sample is written from its JSON rows
        return [dumps(r) for r in recs]
    if schema.format == "text":
        return [str(next(iter(r.values()))) for r in recs]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([[str(r[f]).lower() if isinstance(r[f], bool) else r[f]
                                                      for f, _ in schema.fields] for r in recs])
    return buf.getvalue().splitlines()


