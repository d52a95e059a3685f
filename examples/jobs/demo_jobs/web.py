"""HiBench streaming over web-access records (apps.yaml's `web` schema): identity, repartition,
wordcount, fixwindow, and keycount (a count per key with a chosen state size)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def identity(records: DataFrame, params: Mapping[str, Any]) -> DataFrame:
    return records


def repartition(records: DataFrame, params: Mapping[str, Any]) -> DataFrame:
    # HiBench "repartition": a full shuffle of the records, nothing else.
    return records.repartition(int(params.get("partitions", 4)))


def _count_by(df: DataFrame, key: str) -> DataFrame:
    """Count per `key`, with the newest event time that counted (`ts`, the sink's latency)."""
    return df.groupBy(key).agg(F.count(F.lit(1)).alias("count"), F.max("ts").alias("ts"))


def wordcount(records: DataFrame, params: Mapping[str, Any]) -> DataFrame:
    words = records.select(F.explode(F.split("words", " ")).alias("word"), "ts").where(F.col("word") != "")
    return _count_by(words, "word")


def keycount(records: DataFrame, params: Mapping[str, Any]) -> DataFrame:
    """The key is the record id (one state row per record) or, with `key_modulo` K, one of K keys."""
    k = params.get("key_modulo")
    key = F.col("id") if not k else F.concat(F.lit("k"), F.pmod(F.xxhash64("id"), F.lit(int(k))).cast("string"))
    return _count_by(records.withColumn("key", key), "key")


def fixwindow(records: DataFrame, params: Mapping[str, Any]) -> DataFrame:
    """Per IP and window (`window_s`, default 30 s): the count and the first and last event times.
    The watermark is the stage's (`source.watermark`), set by the platform."""
    size = f"{int(params.get('window_s', 30))} seconds"
    agg = (records.groupBy(F.window("ts", size).alias("w"), "ip")
           .agg(F.count(F.lit(1)).alias("count"), F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts")))
    return agg.select(F.col("w.start").alias("window_start"), "ip", "count", "first_ts", "last_ts")
