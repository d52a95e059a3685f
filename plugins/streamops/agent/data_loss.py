"""Records of a Kafka topic lost before a stage read them (retention, delete-records, a recreated
topic): Spark's `KAFKA_DATA_LOSS.*` error (the source reads with failOnDataLoss=true) becomes the
run's reason, naming the topic, the partitions and the offset ranges, for the watchdog's
`data_lost` failure. Never retried: the same offsets fail the same way (docs/input.md).

Spark's message names one partition (the first task that failed) and the batch's whole range,
so the reason adds what was measured: each partition's committed offset (the error's "Current
Committed Offsets") against the oldest offset the broker still holds.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass

log = logging.getLogger("streamops.run_stage")

MARKER = "data lost:"  # how a run's stop reason says it (watchdog: a `data_lost` failure)
CONDITION = "KAFKA_DATA_LOSS"
# The executor's message where the condition itself is lost (text only, or an older connector).
_TEXT = "Some data may have been lost because they are not available in Kafka any more"

_RANGE = re.compile(r"Could not read records in offset \[(\d+), (\d+)\) for topic partition (\S+?)\s")
_RESET = re.compile(r"Starting offset for (\S+) was (\d+) but consumer reset to (\d+)")
_COMMITTED = re.compile(r"Current Committed Offsets: \{[^:]*: (\{.*?\}\})\}")


@dataclass(frozen=True, order=True)
class Lost:
    topic: str
    partition: int
    start: int
    end: int  # exclusive

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition} [{self.start}, {self.end})"


def is_data_loss(condition: str | None, text: str) -> bool:
    return bool(condition and condition.startswith(CONDITION)) or CONDITION in text or _TEXT in text


def _tp(name: str) -> tuple[str, int]:
    topic, _, partition = name.rpartition("-")  # "clicks-1": a topic's name may hold '-' itself
    return topic, int(partition)


def from_error(text: str) -> list[Lost]:
    """The ranges Spark's message names: a range it could not read (the batch's, from the
    committed offset), or a start offset the consumer was reset past."""
    out = {Lost(*_tp(m.group(3)), int(m.group(1)), int(m.group(2))) for m in _RANGE.finditer(text)}
    out |= {Lost(*_tp(m.group(1)), int(m.group(2)), int(m.group(3))) for m in _RESET.finditer(text)}
    return sorted(out)


def committed(text: str) -> dict[tuple[str, int], int]:
    """The query's committed offsets as its error states them: {(topic, partition): offset}."""
    m = _COMMITTED.search(text)
    if not m:
        return {}
    try:
        offsets = json.loads(m.group(1))
    except ValueError:
        return {}
    return {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}


def measured(committed_at: dict[tuple[str, int], int], earliest: dict[tuple[str, int], int]) -> list[Lost]:
    """Pure: a partition whose oldest offset is past the committed one lost what lies between."""
    return sorted(Lost(t, p, c, earliest[(t, p)]) for (t, p), c in committed_at.items()
                  if (t, p) in earliest and earliest[(t, p)] > c)


def earliest_offsets(partitions: list[tuple[str, int]], bootstrap: str | None) -> dict[tuple[str, int], int]:
    """The oldest offset each partition still holds, asked of the broker (confluent-kafka);
    empty when it cannot say (no client, the broker away): the error's ranges still stand."""
    try:
        from confluent_kafka import Consumer, TopicPartition

        from streamops import kafka_broker

        c = Consumer({**kafka_broker.client_settings(bootstrap).librdkafka(), "group.id": "streamops-data-loss",
                      "enable.auto.commit": False, "log_level": 0})
        try:
            return {(t, p): c.get_watermark_offsets(TopicPartition(t, p), timeout=10)[0] for t, p in partitions}
        finally:
            c.close()
    except Exception as e:  # noqa: BLE001 - best effort: the reason then names what Spark said
        log.warning("action=data-loss could not read the topic's oldest offsets: %s", str(e).splitlines()[0])
        return {}


def describe(topic: str, lost: list[Lost], said: list[Lost]) -> str:
    """The run's reason: MARKER, the topic, its partitions and ranges, and the way on."""
    ranges = lost or said
    parts = sorted({x.partition for x in ranges})
    what = (f"topic {topic}, partition{'s' if len(parts) != 1 else ''} {', '.join(map(str, parts))}: "
            f"offsets {', '.join(str(x) for x in ranges)} deleted before they were read"
            if ranges else f"topic {topic}: records deleted before they were read (Spark named no range)")
    if lost and said and said != lost:
        what += f" (Spark's error: {', '.join(str(x) for x in said)} could not be read)"
    return (f"{MARKER} {what}; not restarted (the same offsets fail again): to go on past the gap, set "
            f"source.fail_on_data_loss: false, `streamops start` the stage, then set it back (docs/input.md)")


def reason(topic: str, bootstrap: str | None, text: str) -> str:
    """The run's reason for a data-loss error `text`: what was measured, else what Spark said."""
    said, at = from_error(text), committed(text)
    lost = measured(at, earliest_offsets(sorted(at), bootstrap)) if at else []
    return describe(topic, lost, said)
