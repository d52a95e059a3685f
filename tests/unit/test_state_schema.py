"""A job's new code whose state the checkpoint cannot hold: Spark's state schema check fails the
query, and the run fails at once with the operator and the fields named (never retried, never
quarantined). Pure: the chain and text are those a real query raised on pyspark 4.3.0 when a
session window's aggregates gained `sum(length(url))` over an existing checkpoint
(tests/integration/test_own_jobs.py upgrades a running stage that way)."""

from __future__ import annotations

import json

from streamops.agent import state_schema
from streamops.agent.errors import JavaLink, classify, classify_chain, is_transient

ERROR = """[STREAM_FAILED] Query [id = 0f89b529, runId = 99e06bca] terminated with exception: \
[STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE] Provided value schema does not match existing state value schema.
Please check number and type of fields.
Existing value_schema=StructType(StructField(session_window,StructType(StructField(start,TimestampType,true),\
StructField(end,TimestampType,true)),true),StructField(user,StringType,true),StructField(count,LongType,true),\
StructField(max,TimestampType,true)) and new value_schema=StructType(StructField(session_window,StructType(\
StructField(start,TimestampType,true),StructField(end,TimestampType,true)),true),StructField(user,StringType,true),\
StructField(count,LongType,true),StructField(max,TimestampType,true),StructField(sum,LongType,true)).
If you want to force running the query without schema validation, please set \
spark.sql.streaming.stateStore.stateSchemaCheck to false.
"""


def test_a_state_the_new_code_cannot_read_is_its_own_class_never_retried():
    chain = [JavaLink(("org.apache.spark.sql.streaming.StreamingQueryException",), "…", "STREAM_FAILED"),
             JavaLink(("org.apache.spark.sql.execution.streaming.state.StateStoreValueSchemaNotCompatible",
                       "org.apache.spark.SparkUnsupportedOperationException"), "…",
                      "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE")]
    assert classify_chain(chain).kind == "incompatible"
    assert classify(ERROR).kind == "incompatible"  # text only
    assert not is_transient(ERROR)


def test_the_reason_names_the_operator_and_the_fields_added(tmp_path):
    meta = tmp_path / "state" / "0" / "_metadata" / "metadata"
    meta.parent.mkdir(parents=True)
    meta.write_text("v1\n" + json.dumps({"operatorInfo": {"operatorId": 0,
                                                          "operatorName": "sessionWindowStateStoreSaveExec"}}))
    why = state_schema.reason("STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE", ERROR, tmp_path)
    assert why.startswith(state_schema.MARKER)
    assert "operator 0 (sessionWindowStateStoreSaveExec)" in why and "value fields added: sum" in why


def test_fields_removed_and_changed_types_are_told_apart():
    old = "StructType(StructField(a,LongType,true),StructField(b,LongType,true))"
    assert state_schema.field_changes(f"Existing key_schema={old} and new key_schema="
                                      "StructType(StructField(a,LongType,true))") == ["key fields removed: b"]
    assert state_schema.field_changes(f"Existing value_schema={old} and new value_schema=StructType("
                                      "StructField(a,StringType,true),StructField(b,LongType,true))") == \
        ["value field types or order changed: a, b"]
