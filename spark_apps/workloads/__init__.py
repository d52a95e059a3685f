"""The pipelines (POLICIES.md §8). Each turns valid typed records into sink rows.

A sink row has four columns: `key` (deterministic output key), `value` (JSON text),
`event_ts` (the latest event time that contributed, for end-to-end latency) and `version`
(monotone per key — a count, or 0 for append-only outputs — so replays and replicas never
overwrite a newer value). Stateful workloads keep their state in the checkpoint (RocksDB).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streamops.records import CELL_LAT_DEG, CELL_LON_DEG, TAXI_LAT_MIN, TAXI_LON_MIN
from streamops.registry import STATEFUL_WORKLOADS, WORKLOAD_INPUT


@dataclass(frozen=True)
class Workload:
    name: str
    output_mode: str
    build: Callable[[DataFrame, dict[str, Any]], DataFrame]

    @property
    def input_kind(self) -> str:
        return WORKLOAD_INPUT[self.name]

    @property
    def stateful(self) -> bool:
        return self.name in STATEFUL_WORKLOADS


def _record_value(df: DataFrame) -> DataFrame:
    fields = [c for c in df.columns if c not in ("raw", "source_file", "reason_kind", "reason")]
    return df.select(
        F.col("id").alias("key"),
        F.to_json(F.struct(*fields)).alias("value"),
        F.col("ts").alias("event_ts"),
        F.lit(0.0).alias("version"),
    )


def identity(df: DataFrame, params: dict[str, Any]) -> DataFrame:
    return _record_value(df)


def repartition(df: DataFrame, params: dict[str, Any]) -> DataFrame:
    # HiBench "repartition": a full shuffle of the records, nothing else.
    return _record_value(df.repartition(int(params.get("partitions", 4))))


def _count_by(df: DataFrame, key: str, extra: list | None = None) -> DataFrame:
    agg = df.groupBy(key).agg(F.count(F.lit(1)).alias("count"), F.max("ts").alias("event_ts"))
    return agg.select(
        F.col(key).cast("string").alias("key"),
        F.to_json(F.struct(F.col(key).alias(key), "count")).alias("value"),
        "event_ts",
        F.col("count").cast("double").alias("version"),
    )


def wordcount(df: DataFrame, params: dict[str, Any]) -> DataFrame:
    words = df.select(F.explode(F.split("words", " ")).alias("word"), "ts").where(F.col("word") != "")
    return _count_by(words, "word")


def patterns(df: DataFrame, params: dict[str, Any]) -> DataFrame:
    return _count_by(df, "pattern")


def keycount(df: DataFrame, params: dict[str, Any]) -> DataFrame:
    """Count per key, with a chosen state size: the key is the record id (one state row per
    record) or, with `key_modulo` K, one of K keys. Used to benchmark state sizes."""
    k = params.get("key_modulo")
    key = F.col("id") if not k else F.concat(F.lit("k"), F.pmod(F.xxhash64("id"), F.lit(int(k))).cast("string"))
    return _count_by(df.withColumn("key", key), "key")


def fixwindow(df: DataFrame, params: dict[str, Any]) -> DataFrame:
    """HiBench fixwindow: per IP and 30 s window, the count and the first and last event times."""
    size = f"{int(params.get('window_s', 30))} seconds"
    agg = (
        df.withWatermark("ts", params.get("watermark", "2 minutes"))
        .groupBy(F.window("ts", size).alias("w"), "ip")
        .agg(F.count(F.lit(1)).alias("count"), F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts"))
    )
    return agg.select(
        F.concat_ws("|", F.date_format("w.start", "yyyy-MM-dd'T'HH:mm:ss"), "ip").alias("key"),
        F.to_json(F.struct(F.col("w.start").alias("window_start"), "ip", "count", "first_ts", "last_ts"))
        .alias("value"),
        F.col("last_ts").alias("event_ts"),
        F.col("count").cast("double").alias("version"),
    )


def _cell(lon: str, lat: str):
    """The DEBS 2015 500 m grid cell "x.y"; the same grid as the generator's `taxi_cell`."""
    return F.concat_ws(
        ".",
        F.floor((F.col(lon) - TAXI_LON_MIN) / CELL_LON_DEG).cast("int"),
        F.floor((F.col(lat) - TAXI_LAT_MIN) / CELL_LAT_DEG).cast("int"),
    )


def taxi_top10(df: DataFrame, params: dict[str, Any]) -> DataFrame:
    """Route counts per sliding 30-min window. The top 10 per window is read from the sink
    (view `taxi_top10_routes`): a streaming sort over an aggregate is not supported by Spark."""
    window = f"{int(params.get('window_min', 30))} minutes"
    slide = f"{int(params.get('slide_min', 5))} minutes"
    route = F.concat_ws(">", _cell("pickup_lon", "pickup_lat"), _cell("dropoff_lon", "dropoff_lat"))
    routes = df.select(route.alias("route"), "ts")
    agg = (
        routes.withWatermark("ts", params.get("watermark", window))
        .groupBy(F.window("ts", window, slide).alias("w"), "route")
        .agg(F.count(F.lit(1)).alias("count"), F.max("ts").alias("event_ts"))
    )
    return agg.select(
        F.concat_ws("|", F.date_format("w.start", "yyyy-MM-dd'T'HH:mm"), "route").alias("key"),
        F.to_json(F.struct(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"), "route",
                           "count")).alias("value"),
        "event_ts",
        F.col("count").cast("double").alias("version"),
    )


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        Workload("identity", "append", identity),
        Workload("repartition", "append", repartition),
        Workload("wordcount", "update", wordcount),
        Workload("fixwindow", "update", fixwindow),
        Workload("taxi_top10", "update", taxi_top10),
        Workload("patterns", "update", patterns),
        Workload("keycount", "update", keycount),
    ]
}
