"""Raw JSON lines → typed records, or a reason why not.

Every field is read as a string first and cast with `try_*` functions, so a wrong type is
reported as such instead of silently becoming NULL (or a 1970 timestamp) in a typed parse.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

# field → Spark type it must cast to. Kept beside the generator's record families.
SCHEMAS: dict[str, dict[str, str]] = {
    "web": {"id": "string", "ts": "timestamp", "ip": "string", "url": "string", "status": "int",
            "user": "string", "words": "string"},
    "taxi": {"id": "string", "ts": "timestamp", "medallion": "string", "pickup_ts": "timestamp",
             "dropoff_ts": "timestamp", "pickup_lon": "double", "pickup_lat": "double",
             "dropoff_lon": "double", "dropoff_lat": "double", "fare": "double"},
    "patterns": {"id": "string", "ts": "timestamp", "user": "string", "pattern": "string"},
}

_TS_FORMATS = ("yyyy-MM-dd'T'HH:mm:ss.SSSX", "yyyy-MM-dd'T'HH:mm:ssX", "yyyy-MM-dd'T'HH:mm:ss.SSSSSSX")


def _cast(raw: Column, typ: str) -> Column:
    if typ == "string":
        return raw
    if typ == "timestamp":
        return F.coalesce(*[F.try_to_timestamp(raw, F.lit(f)) for f in _TS_FORMATS])
    return raw.try_cast(typ)


def parse_records(lines: DataFrame, kind: str) -> DataFrame:
    """Columns: `raw`, `source_file`, `reason` (NULL when valid) and every typed field of `kind`."""
    schema = SCHEMAS[kind]
    as_strings = StructType([StructField(f, StringType()) for f in schema])
    df = lines.select(
        F.col("value").alias("raw"),
        F.col("_metadata.file_path").alias("source_file"),
        F.from_json("value", as_strings).alias("j"),
        # A JSON object that parses at all; from_json alone cannot tell "{}" from "{"
        F.get_json_object("value", "$").isNotNull().alias("_is_json"),
    )
    typed = {f: _cast(F.col(f"j.{f}"), t) for f, t in schema.items()}
    reason = F.when(~F.col("_is_json") | F.col("j").isNull(), F.lit("malformed JSON"))
    for f, t in schema.items():
        reason = reason.when(F.col(f"j.{f}").isNull(), F.lit(f"missing field {f}"))
    for f, t in schema.items():
        if t != "string":
            reason = reason.when(typed[f].isNull(), F.lit(f"wrong type for field {f}: expected {t}"))
    return df.select("raw", "source_file", reason.alias("reason"), *[c.alias(f) for f, c in typed.items()])


def burn_cpu(df: DataFrame, cost: int) -> DataFrame:
    """Spend `cost` SHA-256 rounds per record, natively in the JVM: lets a 2-core box reach a bottleneck."""
    if cost <= 0:
        return df
    burnt = F.aggregate(F.sequence(F.lit(1), F.lit(cost)), F.col("id"), lambda acc, _: F.sha2(acc, 256))
    return df.where(burnt.isNotNull())
