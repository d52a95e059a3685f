"""Run a team's job inside the driver: hand it the stage's records, check what it returns, and
shape its result for the platform's sinks.

The contract (docs/jobs.md): `build(records, params) -> DataFrame`. `records` holds the columns
of the stage's declared schema, valid lines only (the rest went to quarantine), with the
watermark already set on the event time when the stage declares one. The platform owns the
source, the parse, the sink, the metrics and the fencing.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streamops.agent.metrics import SinkStats
from streamops.agent.sinks import BatchSink
from streamops.jobs import JobError, check_signature, load_callable, user_error
from streamops.registry import PostgresSink, Stage
from streamops.store import sink_tables

log = logging.getLogger("streamops.job")

BUILD_SHAPE = "build(records: DataFrame, params: Mapping) -> DataFrame"
SINK_SHAPE = "write(df: DataFrame, batch_id: int, epoch: int) -> None"


def ship_code(spark, archive: str | None) -> bool:
    """Ship a packaged code path (streamops.jobs.package_code) to every executor, and put it on
    this driver's path, once per session: a warm spare ships its stage's code, and the run that
    adopts it ships the code it was admitted with (the same archive unless the job changed)."""
    sc = spark.sparkContext
    shipped = sc.__dict__.setdefault("_streamops_code", set())
    if not archive or archive in shipped:
        return False
    for old in shipped:  # a spare warmed up on other code: its modules must not answer this run's imports
        name = Path(old).name
        sys.path[:] = [p for p in sys.path if Path(p).name != name]
        for mod in [m for m, v in sys.modules.items() if name in (getattr(v, "__file__", None) or "")]:
            del sys.modules[mod]
    sc.addPyFile(archive)
    shipped.add(archive)
    return True


def job_input(valid: DataFrame, stage: Stage) -> DataFrame:
    """The records the job sees: the schema's columns, watermarked on the event time."""
    df = valid.select(*[name for name, _ in stage.record_schema.fields])
    src = stage.source
    if src.watermark and src.event_time:
        df = df.withWatermark(src.event_time, src.watermark)
    return df


def build_output(stage: Stage, valid: DataFrame, streaming: bool = True) -> DataFrame:
    """The job's result over `valid` records; a JobError names the team's file and line.
    `streaming` False: over a batch (the poison book's dry run): jobs are written for streams,
    and most run on a batch unchanged (a watermark is ignored there)."""
    build = load_callable(stage.job, stage.code)
    check_signature(stage.job, build, 2, BUILD_SHAPE)
    try:
        out = build(job_input(valid, stage), MappingProxyType(dict(stage.params)))
    except Exception as e:  # noqa: BLE001 - the team's error, with its file and line
        raise user_error(stage.job, e, stage.code) from e
    if not isinstance(out, DataFrame):
        raise JobError(f"job {stage.job}: returned {type(out).__name__}, expected a DataFrame ({BUILD_SHAPE})")
    if streaming and not out.isStreaming:
        raise JobError(f"job {stage.job}: returned a batch DataFrame; build the result from `records`")
    return out


def _event_column(stage: Stage, columns: list[str]) -> str | None:
    sink = stage.sink
    named = sink.event_time if isinstance(sink, PostgresSink) else None
    if named:
        return named
    return stage.source.event_time if stage.source.event_time in columns else None


def check_output(stage: Stage, output: DataFrame) -> None:
    """Every column the sink declares is in the job's output: a mismatch names the column."""
    if not isinstance(stage.sink, PostgresSink):
        return
    types = dict(output.dtypes)
    cols = list(types)
    for role, names in (("sink.key", stage.sink.key),
                        ("sink.version", [stage.sink.version] if stage.sink.version not in (None, "batch_id") else []),
                        ("sink.event_time", [stage.sink.event_time] if stage.sink.event_time else [])):
        for name in names:
            if name not in types:
                raise JobError(f"job {stage.job}: {role} names column {name!r}, which its output does not have "
                               f"(output columns: {', '.join(cols)})")
    event = _event_column(stage, cols)
    if event and types[event] != "timestamp":
        raise JobError(f"job {stage.job}: sink.event_time {event!r} is {types[event]}, expected timestamp")


def ensure_table(stage: Stage, output: DataFrame, stage_id: str) -> None:
    """`sink.table`: the typed view of the stage's results (store.sink_tables), created on the
    first start and checked at every later one; a mismatch stops the start, naming the column."""
    if isinstance(stage.sink, PostgresSink) and stage.sink.table:
        try:
            how = sink_tables.ensure(stage.sink.table, stage_id, [(f.name, f.dataType.simpleString())
                                                                  for f in output.schema.fields])
        except sink_tables.SinkTableMismatch as e:
            raise JobError(f"job {stage.job}: {e}") from None
        log.info("action=sink-table sinks.%s %s", stage.sink.table, how)


def sink_shape(stage: Stage, output: DataFrame) -> Callable[[DataFrame, int], DataFrame]:
    """(batch, batch id) → the upsert sink's rows: `key` (the declared key columns, or the whole
    row), `value` (the row as JSON), `event_ts` and `version` (sink.version)."""
    check_output(stage, output)
    sink = stage.sink
    assert isinstance(sink, PostgresSink)
    cols = output.columns
    row_json = F.to_json(F.struct(*[F.col(f"`{c}`") for c in cols]))
    key = (F.concat_ws("|", *[F.coalesce(F.col(f"`{k}`").cast("string"), F.lit("")) for k in sink.key])
           if sink.key else F.md5(row_json))
    event = _event_column(stage, cols)
    event_ts = F.col(f"`{event}`") if event else F.lit(None).cast("timestamp")

    def shape(df: DataFrame, batch_id: int) -> DataFrame:
        version = (F.lit(float(batch_id)) if sink.version == "batch_id" else
                   F.col(f"`{sink.version}`").cast("double") if sink.version else F.lit(0.0))
        return df.select(key.alias("key"), row_json.alias("value"), event_ts.cast("timestamp").alias("event_ts"),
                         version.alias("version"))

    return shape


def shaped(sink: Callable[[DataFrame, int], None], shape: Callable[[DataFrame, int], DataFrame]):
    def write(df: DataFrame, batch_id: int) -> None:
        sink(shape(df, batch_id), batch_id)

    return write


class UserSink(BatchSink):
    """The team's `foreach_batch` function, called as `fn(df, batch_id, epoch)` between the
    platform's fence and its commit row. `epoch` is the run's fencing token (its deployment id,
    which grows with every run of the stage): a write keyed by batch id that keeps the highest
    epoch is idempotent and never lets a replaced run overwrite its successor (docs/jobs.md)."""

    def __init__(self, stage: Stage, stage_id: str, deployment_id: int | None,
                 on_commit: Callable[[SinkStats], None] | None = None, abort: threading.Event | None = None,
                 event_time: str | None = None):
        super().__init__(stage_id, deployment_id, on_commit, abort)
        self.ref = stage.sink.function  # type: ignore[union-attr]
        self.fn = load_callable(self.ref, stage.code)
        check_signature(self.ref, self.fn, 3, SINK_SHAPE)
        self.event_time, self.code = event_time, stage.code

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        event = F.col(f"`{self.event_time}`") if self.event_time else F.lit(None).cast("timestamp")
        super().__call__(df.withColumn("event_ts", event), batch_id)

    def write(self, df: DataFrame, batch_id: int) -> None:
        try:
            self.fn(df.drop("event_ts"), batch_id, self.deployment_id or 0)
        except Exception as e:  # noqa: BLE001 - the team's error, with its file and line; the batch fails
            raise user_error(self.ref, e, self.code) from e


def user_sink(stage: Stage, output: DataFrame, stage_id: str, deployment_id: int | None, **kw: Any) -> UserSink:
    return UserSink(stage, stage_id, deployment_id, event_time=_event_column(stage, output.columns), **kw)
