"""Raw input lines → typed records of the stage's declared schema, or the reason why not.

The verdict on each line is `streamops.records.check_line`, run in the Python workers: the
same function the generator's ground truth and the tests' oracle use, so what a stage counts
is exactly what the contract calls a record. It sees the line's exact bytes (Spark keeps them:
`value` cast to binary), so invalid UTF-8 and NUL bytes are seen rather than replaced.

Measured on 2 cores (200 000 web lines, median of 3): 3.3 s, as fast as the JVM's own
`from_json` parse (3.2 s), which could not refuse wrong types, trailing text or duplicate keys.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from streamops.records import MAX_RECORD_BYTES, RecordSchema, udf_row
from streamops.sources import KafkaSource

# Timestamps cross from Python as epoch microseconds (exact, and no time zone to lose).
_SPARK_TYPES = {"string": T.StringType(), "timestamp": T.LongType(), "int": T.IntegerType(),
                "bigint": T.LongType(), "double": T.DoubleType(), "boolean": T.BooleanType()}


def source_file(path: Column) -> Column:
    """The input file as a plain path: Spark says `file:/x` or `file:///x`; the checkpoint's
    source log says `file:///x`. Quarantine rows and poison filters compare these."""
    return F.regexp_replace(path, r"^file:(//)?", "")


def read_lines(spark, record: RecordSchema, paths, *, streaming: bool, max_files: int | None = None) -> DataFrame:
    """The input as `value` lines (plus the hidden `_metadata` column): text files as they are; a
    Parquet source's rows read with the declared schema and rendered as JSON, so the one contract
    (check_line) judges them too. A file Spark cannot read as Parquet fails its batch, and the
    poison book quarantines it by file."""
    reader = spark.readStream if streaming else spark.read
    if max_files is not None:
        reader = reader.option("maxFilesPerTrigger", max_files)
    if record.format != "parquet":
        return reader.format("text").load(paths)
    rows = reader.schema(record.ddl).format("parquet").load(paths)
    return rows.select(F.to_json(F.struct(*[F.col(f"`{n}`") for n, _ in record.fields])).alias("value"),
                       "_metadata")


def kafka_locator() -> Column:
    """A Kafka record's locator, `topic/partition/offset`: where the quarantine's `source_file`
    points for a file's line. Unique per record, so a replay adds no row."""
    return F.concat_ws("/", F.col("topic"), F.col("partition").cast("string"), F.col("offset").cast("string"))


def read_kafka(spark, source: KafkaSource, max_offsets: int | None = None) -> DataFrame:
    """The topic's records as `value` (the record's bytes; a null value is an empty line) and
    `source_file` (kafka_locator). Bootstrap and credentials: the source's, the environment's or
    the embedded broker's (kafka_broker.client_settings)."""
    from streamops import kafka_broker

    reader = spark.readStream.format("kafka")
    options = {**kafka_broker.client_settings(source.bootstrap_servers).spark_options(),
               "subscribe": source.topic, "startingOffsets": source.starting_offsets,
               # Records deleted before they were read fail the query (a `data_lost` failure,
               # agent/data_loss.py) unless the stage chose to skip them (docs/input.md).
               "failOnDataLoss": str(source.fail_on_data_loss).lower()}
    if max_offsets is not None:
        options["maxOffsetsPerTrigger"] = str(max_offsets)
    if source.min_partitions is not None:
        options["minPartitions"] = str(source.min_partitions)
    records = reader.options(**options).load()
    return records.select(F.coalesce(F.col("value"), F.lit(bytearray())).alias("value"),
                          kafka_locator().alias("source_file"))


def write_sample(spark, record: RecordSchema, lines: list[str], directory: Path, files: int = 1) -> None:
    """Sample `lines` (valid ones, in JSON for a Parquet source) as the stage's input format, in
    `files` files (a warm-up's file per core)."""
    directory.mkdir(parents=True, exist_ok=True)
    if record.format == "parquet":
        rows = spark.read.schema(record.ddl).json(spark.sparkContext.parallelize(lines, max(1, files)))
        rows.write.mode("overwrite").parquet(str(directory / "sample"))
        for part in (directory / "sample").glob("*.parquet"):  # the source reads files, not a table
            part.rename(directory / part.name)
        shutil.rmtree(directory / "sample", ignore_errors=True)
        return
    step = -(-len(lines) // max(1, files))
    for i in range(0, len(lines), step):
        (directory / f"sample-{i:04d}.txt").write_text("\n".join(lines[i:i + step]) + "\n")


def _verdict_udf(record: RecordSchema, max_bytes: int):
    schema = T.StructType([T.StructField("reason_kind", T.StringType()), T.StructField("reason", T.StringType())]
                          + [T.StructField(f, _SPARK_TYPES[t]) for f, t in record.fields])
    # Non-deterministic for the optimizer only: otherwise it inlines the struct into every
    # field reference and a filter, and runs the Python function once per reference.
    return F.udf(lambda raw, size: udf_row(record, raw, size, max_bytes), schema, useArrow=False).asNondeterministic()


def parse_records(lines: DataFrame, record: RecordSchema, max_bytes: int = MAX_RECORD_BYTES,
                  exclude_files: list[str] | None = None) -> DataFrame:
    """Columns: `raw` (the line's bytes), `source_file` (its file, or a Kafka record's locator),
    `reason_kind` and `reason` (NULL when the line is a record) and every typed column of the
    `record` schema. Lines of `exclude_files` (a poison batch quarantined whole) are dropped."""
    size = F.octet_length("value")
    raw = F.col("value").cast("binary")
    # A Kafka record carries its locator (read_kafka); a file's line, its file.
    locator = F.col("source_file") if "source_file" in lines.columns else source_file(F.col("_metadata.file_path"))
    df = lines.select(raw.alias("raw"), locator.alias("source_file"), size.alias("_size"))
    if exclude_files:
        df = df.where(~F.col("source_file").isin(*exclude_files))
    # A line over the limit is not shipped to Python at all: the UDF gets NULL and its size.
    verdict = _verdict_udf(record, max_bytes)(F.when(F.col("_size") <= max_bytes, F.col("raw")), F.col("_size"))
    typed = [F.timestamp_micros(F.col(f"v.{f}")).alias(f) if t == "timestamp" else F.col(f"v.{f}").alias(f)
             for f, t in record.fields]
    return (df.select("raw", "source_file", verdict.alias("v"))
            .select("raw", "source_file", F.col("v.reason_kind").alias("reason_kind"),
                    F.col("v.reason").alias("reason"), *typed))


def burn_cpu(df: DataFrame, cost: int) -> DataFrame:
    """Spend `cost` SHA-256 rounds per record, natively in the JVM: lets a 2-core box reach a bottleneck."""
    if cost <= 0:
        return df
    seed = F.coalesce(F.col(df.columns[0]).cast("string"), F.lit(""))  # any record column will do
    burnt = F.aggregate(F.sequence(F.lit(1), F.lit(cost)), seed, lambda acc, _: F.sha2(acc, 256))
    return df.where(burnt.isNotNull())
