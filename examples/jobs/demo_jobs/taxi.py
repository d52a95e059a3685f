"""DEBS 2015 query 1 over the `taxi` schema: route counts per sliding window. The top 10 per
window is read from the sink (the view in examples/sql/taxi_top10_routes.sql): Spark cannot sort
a streaming aggregate."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

# The DEBS 2015 grid: 500 m cells from this corner.
LON_MIN, LAT_MIN = -74.05, 40.60
CELL_LON_DEG = 0.005986  # 500 m east-west at NYC latitude
CELL_LAT_DEG = 0.004491556  # 500 m north-south


def _cell(lon: str, lat: str) -> Column:
    return F.concat_ws(".", F.floor((F.col(lon) - LON_MIN) / CELL_LON_DEG).cast("int"),
                       F.floor((F.col(lat) - LAT_MIN) / CELL_LAT_DEG).cast("int"))


def top_routes(records: DataFrame, params: Mapping[str, Any]) -> DataFrame:
    """Trips per route and window (`window_min`, sliding every `slide_min`); `ts` is the newest
    trip counted."""
    window = f"{int(params.get('window_min', 30))} minutes"
    slide = f"{int(params.get('slide_min', 5))} minutes"
    route = F.concat_ws(">", _cell("pickup_lon", "pickup_lat"), _cell("dropoff_lon", "dropoff_lat"))
    agg = (records.select(route.alias("route"), "ts")
           .groupBy(F.window("ts", window, slide).alias("w"), "route")
           .agg(F.count(F.lit(1)).alias("count"), F.max("ts").alias("ts")))
    return agg.select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"), "route", "count",
                      "ts")
