"""The generator's ticks produced to a Kafka topic instead of written as files: each line one
message (its record's id the key, so the partitioner spreads them over the topic's partitions;
a garbage line keeps the id it still holds, else no key), the same trace, seed and garbage share
as files. The manifest (the ground truth, and where a resumed run goes on) stays in a local
directory. A tick is flushed to the broker before its manifest entry: a crash between the two
produces that tick again on resume (at least once, which the stage's count then shows).

The client configuration is passed in (librdkafka's, `kafka_broker.client_settings().librdkafka()`):
the generator does not know where the broker is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .manifest import append_line
from .records import format_ts, line_id
from .writer import GenerateSummary, Generator, epoch_ms_now

# Kafka's own default is one; a topic the generator creates gets a few, so keys spread.
DEFAULT_PARTITIONS = 4


def ensure_topic(conf: dict[str, Any], topic: str, partitions: int, timeout_s: float = 30) -> bool:
    """Create `topic` with `partitions` (the broker's replication default) unless it exists;
    whether it was created. An existing topic keeps its partitions."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(conf)
    if topic in admin.list_topics(timeout=timeout_s).topics:
        return False
    for f in admin.create_topics([NewTopic(topic, partitions, replication_factor=-1)]).values():
        f.result(timeout=timeout_s)
    return True


class TopicGenerator(Generator):
    """A Generator whose tick is a batch of messages to `topic` (flushed) instead of a file."""

    def __init__(self, manifest_dir: Path | str, conf: dict[str, Any], topic: str, *args: Any, **kwargs: Any):
        super().__init__(manifest_dir, *args, **kwargs)
        from confluent_kafka import Producer

        self.topic = topic
        # Idempotent: a send retried across a broker crash is written once (kafka_broker.librdkafka_producer).
        self.producer = Producer({**conf, "enable.idempotence": True, "linger.ms": 20})
        self.errors: list[str] = []

    def _stage(self, name: str, payload: bytes) -> bytes:
        return payload  # nothing to stage: the messages go out at publish time

    def _discard(self, tmp: Any) -> None:
        pass

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))

    def _publish(self, tmp: Any, entry: dict[str, Any]) -> None:
        for line in bytes(tmp).decode("utf-8").splitlines():
            key = line_id(line)
            while True:
                try:
                    self.producer.produce(self.topic, value=line.encode("utf-8"),
                                          key=key.encode("utf-8") if key else None, on_delivery=self._delivered)
                    break
                except BufferError:  # the client's queue is full: let it send, then try again
                    self.producer.poll(0.5)
        left = self.producer.flush(60)
        if left or self.errors:
            raise RuntimeError(f"topic {self.topic}: tick {entry['tick']} not delivered: {left} message(s) left, "
                               f"errors: {'; '.join(self.errors[:3]) or 'none'}")
        entry["topic"] = self.topic
        entry["published_at"] = format_ts(epoch_ms_now())
        append_line(self.manifest_path, entry)


def produce(manifest_dir: Path | str, conf: dict[str, Any], topic: str, kind: str, trace: Any, *,
            partitions: int = DEFAULT_PARTITIONS, **kwargs: Any) -> GenerateSummary:
    """`generate(...)` to a Kafka topic (created with `partitions` if missing); `kwargs` as generate's.
    The summary's `files` counts ticks."""
    ensure_topic(conf, topic, partitions)
    return TopicGenerator(manifest_dir, conf, topic, kind, trace, **kwargs).run()
