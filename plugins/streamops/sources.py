"""What a stage reads: its source (a directory of files, a Kafka topic) and the declared record
schema every line is checked against (streamops.records). Part of the registry (apps.yaml)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from streamops.records import MAX_RECORD_BYTES, RecordSchema, SchemaError


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Records(_Frozen):
    """What a record of the source is: the declared schema every line is checked against
    (streamops.records.check_line), and the event time the job's windows and the latency use."""

    format: Literal["json", "csv", "text", "parquet"] = Field(default="json", description=(
        "json: one object per line; csv: one row per line, columns in the schema's order; text: the "
        "line itself, in the schema's one STRING column; parquet: files of rows, read with the schema"))
    schema_: str = Field(alias="schema", description=(
        "a Spark DDL string ('user STRING, url STRING, ts TIMESTAMP') or the name of one in the registry's "
        "`schemas`"))
    ranges: dict[str, tuple[float, float]] = Field(default_factory=dict, description=(
        "numeric columns' allowed [low, high]; a value outside is quarantined as 'out of range'"))
    event_time: str | None = Field(default=None, description="the TIMESTAMP column that is the event time")
    watermark: str | None = Field(default=None, description=(
        "how late an event may be, e.g. '2 minutes': the platform sets the watermark on `event_time` "
        "before the job sees the records"))
    max_record_bytes: int = Field(default=MAX_RECORD_BYTES, ge=64,
                                  description="a longer line is quarantined as 'too large' without being parsed")
    expected_rows_s: float | None = Field(default=None, gt=0, description=(
        "rows/s the source is expected to carry (e.g. the feed's rate): sizes a start before any run of the "
        "stage was measured (plan.start_size); none: measured from its runs"))
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, serialize_by_alias=True)

    @model_validator(mode="after")
    def _valid_schema(self) -> _Records:
        try:
            schema = self.record_schema
        except SchemaError as e:
            raise ValueError(f"schema: {e}") from None
        if self.event_time is not None and schema.types.get(self.event_time) != "timestamp":
            raise ValueError(f"event_time: {self.event_time!r} is not a TIMESTAMP column of the schema "
                             f"({schema.ddl})")
        if self.watermark is not None and self.event_time is None:
            raise ValueError("watermark: needs event_time, the column it applies to")
        return self

    @property
    def record_schema(self) -> RecordSchema:
        return RecordSchema.of(self.schema_, self.format, self.ranges)


class FileSource(_Records):
    kind: Literal["files"] = "files"
    path: str = Field(description="input directory; relative paths are under .streamops/data")
    max_files_per_trigger: int = Field(default=50, ge=1)
    landing_quiet_s: float = Field(default=2.0, gt=0, description="a file in <path>/_landing/ unmodified this long "
                                                                   "is complete and moved into the source")
    landing_markers: bool = Field(default=False, description="move a landing file only once <name>.done exists")


class KafkaSource(_Records):
    """A Kafka topic: each record's value is one line of the declared format, judged by check_line;
    a bad one's locator is `topic/partition/offset`. The connector's jars: kafka_broker.spark_jars()."""

    kind: Literal["kafka"]
    topic: str = Field(min_length=1, description="the topic the stage subscribes to")
    bootstrap_servers: str | None = Field(default=None, description=(
        "host:port[,...]; default: $STREAMOPS_KAFKA_BOOTSTRAP, else the embedded broker (with its SCRAM "
        "credentials: streamops.kafka_broker.client_settings)"))
    starting_offsets: Literal["earliest", "latest"] = Field(default="earliest", description=(
        "where a new checkpoint starts; a restart resumes from the checkpoint's offsets"))
    max_offsets_per_trigger: int = Field(default=10_000, ge=1, description="batch size cap, in records")
    partitions: int | None = Field(default=None, ge=1, description=(
        "the topic's partitions when `streamops gen` creates it (default 4); an existing topic keeps its own"))
    fail_on_data_loss: bool = Field(default=True, description=(
        "records deleted before they were read (retention, delete-records, a recreated topic) fail the run "
        "with a `data_lost` failure naming the topic, partitions and offset ranges; false: skip them with a "
        "warning in the driver log (docs/input.md#kafka-records)"))
    min_partitions: int | None = Field(default=None, ge=1, description=(
        "split the topic's partitions into at least this many Spark tasks (default: one task a partition)"))

    @model_validator(mode="after")
    def _records_not_files(self) -> KafkaSource:
        if self.format == "parquet":
            raise ValueError("format: parquet is a format of files; a Kafka record's value is json, csv or text")
        return self
