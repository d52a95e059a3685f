"""UPM-CEP's pattern counts over the `patterns` schema."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def count(records: DataFrame, params: Mapping[str, Any]) -> DataFrame:
    return records.groupBy("pattern").agg(F.count(F.lit(1)).alias("count"), F.max("ts").alias("ts"))
