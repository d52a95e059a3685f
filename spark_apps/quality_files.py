"""The nightly data-quality suites that need Spark, as a job of their own: a stage's input JSON
lines (parsed by the stage's own parser) and a Parquet sink's batch directories, validated with
Great Expectations on Spark DataFrames. `quality.run_suites` runs it as a short-lived process, so
the control plane never imports Spark or driver code; the results go to dq_results and, one JSON
object per line prefixed `RESULT `, to stdout.

    python spark_apps/quality_files.py --day 2026-11-22 [--app APP] [--max-files 200]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from datetime import date
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_apps.parse import parse_records, source_file
from streamops.generator import kind_for
from streamops.quality import runner, suites
from streamops.records import RecordSchema
from streamops.registry import FileSource

RESULT_PREFIX = "RESULT "


def input_frame(spark: SparkSession, files: list[Path], schema: RecordSchema, event_time: str | None = "ts",
                now: float | None = None) -> DataFrame:
    """The parsed records of `files` (columns of `parse_records`), plus, with an `event_time`,
    `event_age_s` (now − event time) and `publish_lag_s` (the file's modification time, when it
    was published, − event time), in seconds. Computed here because GX compares columns with
    constants only."""
    paths = [str(p) for p in files]
    parsed = parse_records(spark.read.format("text").load(paths), schema)
    if not event_time:
        return parsed
    published = (spark.read.format("text").load(paths)
                 .select(source_file(F.col("_metadata.file_path")).alias("source_file"),
                         F.col("_metadata.file_modification_time").alias("published_at"))
                 .distinct())
    now_s = time.time() if now is None else now
    ts_s = F.unix_micros(event_time) / 1e6
    return (parsed.join(F.broadcast(published), "source_file", "left")
            .withColumn("event_age_s", F.lit(float(now_s)) - ts_s)
            .withColumn("publish_lag_s", F.unix_micros("published_at") / 1e6 - ts_s)
            .drop("published_at"))


def validate_input_files(v, spark: SparkSession, files: list[Path], source: dict, **bounds):
    src = FileSource.model_validate(source)
    schema = src.record_schema
    df = input_frame(spark, files, schema, src.event_time)
    return v.validate_dataframe(df, suites.input_records_suite(schema.types, src.event_time, kind_for(schema),
                                                               **bounds))


def parquet_frame(spark: SparkSession, directory: Path, files: list[Path]) -> DataFrame:
    """Rows of a Parquet sink (agent/sinks.py ParquetSink: `<path>/batch_id=N/part-*.parquet`),
    with `batch_id` from the directory name and `count` from the JSON value."""
    df = spark.read.option("basePath", str(directory)).parquet(*[str(p) for p in files])
    return df.withColumn("count", F.get_json_object("value", "$.count").cast("bigint"))


def validate_parquet_sink(v, spark: SparkSession, directory: Path, files: list[Path]):
    return v.validate_dataframe(parquet_frame(spark, directory, files), suites.parquet_sink_suite())


def file_suites(v, targets: list[dict], day: date, spark: SparkSession | None, max_files: int) -> list[runner.Result]:
    """input_records per stage with a file source and sink_outputs_parquet per Parquet sink,
    on the files `runner.file_work` picks. A local[1] session is started only if there are
    files, unless `spark` is given."""
    work = runner.file_work(targets, day, max_files)
    if not work:
        return []
    own = spark is None
    if spark is None:
        from spark_apps.stage import build_session

        spark = build_session("streamops-data-quality", cores=1, state_partitions=1)
    session = spark
    validate = {suites.INPUT_RECORDS: lambda w: validate_input_files(v, session, w.files, w.source),
                suites.SINK_PARQUET: lambda w: validate_parquet_sink(v, session, w.directory, w.files)}
    try:
        return [runner.guard(w.suite, w.target, w.app, day, lambda w=w: runner.to_result(
                    validate[w.suite](w), w.suite, w.target, w.app, day)) for w in work]
    finally:
        if own:
            session.stop()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="quality_files.py")
    p.add_argument("--day", required=True, type=date.fromisoformat, help="the UTC day to validate (YYYY-MM-DD)")
    p.add_argument("--app", help="only this app's stages (default: every app)")
    p.add_argument("--max-files", type=int, default=200, help="input files per stage, evenly spread (default 200)")
    args = p.parse_args(argv)
    with runner.Validator() as v:
        results = file_suites(v, runner.targets(args.day, args.app), args.day, None, args.max_files)
    for r in runner.store(results):
        print(RESULT_PREFIX + json.dumps(asdict(r), default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
