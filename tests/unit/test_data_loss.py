"""A Kafka source's data-loss error (Spark 4.2.0's connector, failOnDataLoss=true) read into the
topic, partitions and offset ranges of a `data_lost` failure. Pure: the text is the one a real
query raised (tests/integration/test_kafka_ops.py runs it for real)."""

from __future__ import annotations

from streamops.agent import data_loss
from streamops.agent.data_loss import Lost
from streamops.agent.errors import JavaLink, classify, classify_chain, is_transient

# StreamingQueryException's text as str(q.exception()) gave it (the topic's name holds '-').
ERROR = """[STREAM_FAILED] Query [id = e464b0e7, runId = 4cfebbab] terminated with exception: Some data may have \
been lost because they are not available in Kafka any more;
either the data was aged out by Kafka or the topic may have been deleted before all the data in the
topic was processed.
If you don't want your streaming query to fail on such cases, set the source option failOnDataLoss to false.
Reason: Could not read records in offset [20, 45) for topic partition t-8e4651-0
with consumer group spark-kafka-source-2b209dc3-7cf6-4c3b-ac23-9de750e1dfdc-1641464304-executor. SQLSTATE: XXKST
=== Streaming Query ===
Identifier: [id = e464b0e7, runId = 4cfebbab]
Current Committed Offsets: {KafkaV2[Subscribe[t-8e4651]]: {"t-8e4651":{"0":20,"1":20}}}
Current Available Offsets: {KafkaV2[Subscribe[t-8e4651]]: {"t-8e4651":{"0":45,"1":45}}}
"""


def test_the_ranges_spark_names_and_the_committed_offsets_are_read_from_its_error():
    assert data_loss.from_error(ERROR) == [Lost("t-8e4651", 0, 20, 45)]
    assert data_loss.committed(ERROR) == {("t-8e4651", 0): 20, ("t-8e4651", 1): 20}
    reset = "Reason: Starting offset for clicks-3 was 7 but consumer reset to 12."
    assert data_loss.from_error(reset) == [Lost("clicks", 3, 7, 12)]


def test_what_was_measured_names_every_partition_and_its_exact_gap():
    lost = data_loss.measured({("t", 0): 20, ("t", 1): 20, ("t", 2): 5}, {("t", 0): 40, ("t", 1): 30, ("t", 2): 5})
    assert lost == [Lost("t", 0, 20, 40), Lost("t", 1, 20, 30)]
    why = data_loss.describe("t", lost, [Lost("t", 0, 20, 45)])
    assert why.startswith(data_loss.MARKER)
    assert "topic t, partitions 0, 1: offsets t/0 [20, 40), t/1 [20, 30) deleted before they were read" in why
    assert "Spark's error: t/0 [20, 45) could not be read" in why
    assert "fail_on_data_loss: false" in why and "streamops start" in why
    # the broker away: what Spark said still names the topic, partition and range
    assert "partition 0: offsets t/0 [20, 45)" in data_loss.describe("t", [], [Lost("t", 0, 20, 45)])


def test_data_loss_is_its_own_class_never_retried_as_transient():
    chain = [JavaLink(("org.apache.spark.sql.streaming.StreamingQueryException",), "…", "STREAM_FAILED"),
             JavaLink(("org.apache.spark.sql.kafka010.KafkaIllegalStateException",), "…",
                      "KAFKA_DATA_LOSS.COULD_NOT_READ_OFFSET_RANGE")]
    assert classify_chain(chain).kind == "data_lost"
    assert classify(ERROR).kind == "data_lost"  # text only: the executor's message
    assert not is_transient(ERROR)
    assert classify("java.lang.IllegalStateException: something else").kind == "data"
