"""Spark DataFrames for the file-based suites: a stage's input JSON lines (parsed by the stage's
own parser) and a Parquet sink's batch directories. Imports pyspark: only the nightly run uses it."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_apps.workloads.parse import parse_records, source_file
from streamops.quality import suites
from streamops.records import FIELDS
from streamops.registry import WORKLOAD_INPUT


def files_between(directory: Path, start: datetime, end: datetime, max_files: int | None,
                  pattern: str = "part-*.json") -> list[Path]:
    """Files under `directory` matching `pattern` last modified (published) in [start, end), in
    name order; at most `max_files`, evenly spread over them (a day of input can be millions of rows)."""
    if not Path(directory).is_dir():
        return []
    lo, hi = start.timestamp(), end.timestamp()
    files = sorted(p for p in Path(directory).glob(pattern) if lo <= p.stat().st_mtime < hi)
    if max_files and len(files) > max_files:
        step = len(files) / max_files
        files = [files[int(i * step)] for i in range(max_files)]
    return files


def input_frame(spark: SparkSession, files: list[Path], kind: str, now: float | None = None) -> DataFrame:
    """The parsed records of `files` (columns of `parse_records`), plus `event_age_s` (now − event
    time) and `publish_lag_s` (the file's modification time, when the generator published it, −
    event time), in seconds. Computed here because GX compares columns with constants only."""
    paths = [str(p) for p in files]
    parsed = parse_records(spark.read.format("text").load(paths), kind)
    published = (spark.read.format("text").load(paths)
                 .select(source_file(F.col("_metadata.file_path")).alias("source_file"),
                         F.col("_metadata.file_modification_time").alias("published_at"))
                 .distinct())
    now_s = time.time() if now is None else now
    ts_s = F.unix_micros("ts") / 1e6
    return (parsed.join(F.broadcast(published), "source_file", "left")
            .withColumn("event_age_s", F.lit(float(now_s)) - ts_s)
            .withColumn("publish_lag_s", F.unix_micros("published_at") / 1e6 - ts_s)
            .drop("published_at"))


def validate_input_files(v, spark: SparkSession, files: list[Path], workload: str, **bounds):
    kind = WORKLOAD_INPUT[workload]
    df = input_frame(spark, files, kind)
    return v.validate_dataframe(df, suites.input_records_suite(kind, FIELDS[kind], **bounds))


def parquet_frame(spark: SparkSession, directory: Path, files: list[Path]) -> DataFrame:
    """Rows of a Parquet sink (agent/sinks.py ParquetSink: `<path>/batch_id=N/part-*.parquet`),
    with `batch_id` from the directory name and `count` from the JSON value."""
    df = spark.read.option("basePath", str(directory)).parquet(*[str(p) for p in files])
    return df.withColumn("count", F.get_json_object("value", "$.count").cast("bigint"))


def validate_parquet_sink(v, spark: SparkSession, directory: Path, files: list[Path]):
    return v.validate_dataframe(parquet_frame(spark, directory, files), suites.parquet_sink_suite())
