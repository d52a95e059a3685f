"""A stateful streaming query over a Kafka topic, run as its own process by
test_kafka_broker.py (its session needs the connector's jars in `spark.jars` from the JVM's
start, which a test process whose session already exists cannot give it).

    python kafka_count_query.py TOPIC CHECKPOINT EXPECTED_TOTAL

Reads TOPIC from the earliest offset with the embedded broker's SCRAM settings (100 records per
batch), counts records per key with the RocksDB state store, and prints one json line when the
counts add up to EXPECTED_TOTAL: {"counts": {key: n}, "batches": [rows per batch], "provider": …}.
Run again with the same CHECKPOINT and a higher total, it resumes from the checkpoint's offsets and state.
"""

from __future__ import annotations

import json
import os
import sys
import time

from pyspark.sql import SparkSession

from streamops import kafka_broker

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def main(topic: str, checkpoint: str, expected: int) -> None:
    spark = (SparkSession.builder.master("local[2]").appName("kafka-count-query")
             .config("spark.jars", kafka_broker.spark_jars())
             .config("spark.driver.extraJavaOptions", os.environ.get("STREAMOPS_SPARK_JAVA_OPTIONS", ""))
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    reader = spark.readStream.format("kafka")
    for key, value in kafka_broker.client_settings().spark_options().items():
        reader = reader.option(key, value)
    records = (reader.option("subscribe", topic).option("startingOffsets", "earliest")
               .option("maxOffsetsPerTrigger", "100").load())
    counts = records.selectExpr("CAST(key AS STRING) AS k").groupBy("k").count()
    name = f"counts_{int(time.time() * 1000)}"
    q = (counts.writeStream.outputMode("complete").format("memory").queryName(name)
         .option("checkpointLocation", checkpoint).start())
    deadline, got = time.monotonic() + 180, {}
    while time.monotonic() < deadline:
        q.processAllAvailable()
        got = {r["k"]: r["count"] for r in spark.sql(f"SELECT k, count FROM {name}").collect()}
        if sum(got.values()) >= expected:
            break
        time.sleep(0.5)
    progress = q.recentProgress
    batches = [p["numInputRows"] for p in progress if p["numInputRows"]]
    provider = spark.conf.get("spark.sql.streaming.stateStore.providerClass")
    rocksdb_metrics = any(k.startswith("rocksdb") for p in progress for op in p["stateOperators"]
                          for k in op.get("customMetrics", {}))
    q.stop()
    print(json.dumps({"counts": got, "batches": batches, "provider": provider, "rocksdb_metrics": rocksdb_metrics,
                      "spark": spark.version}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
