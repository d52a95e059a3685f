"""A Kafka source's backlog: the records behind the latest offsets, from the query's own progress.

Pure (no Spark): Spark's Kafka source reports, per batch, the offsets it read up to (`endOffset`)
and the newest ones it saw (`latestOffset`), as {topic: {partition: offset}}, plus
`metrics.{min,avg,max}OffsetsBehindLatest`. The lag is the sum over partitions of latest − end:
the records written that no batch has taken yet, which is what the file source's backlog counts
in files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from streamops.checkpoint_layout import Backlog


@dataclass(frozen=True)
class KafkaLag:
    records: int                    # Σ over partitions of latest − end
    end_offsets: dict[str, int]     # "topic/partition" → the offset the batch read up to
    avg_behind: float | None        # Spark's own metrics (per partition)
    max_behind: int | None

    def as_json(self) -> str:
        return json.dumps({"records": self.records, "end_offsets": self.end_offsets,
                           "avg_offsets_behind_latest": self.avg_behind, "max_offsets_behind_latest": self.max_behind},
                          sort_keys=True)


def _offsets(value: Any) -> dict[str, int]:
    """{topic: {partition: offset}} (as parsed JSON, or its text) → {"topic/partition": offset}."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, dict):
        return {}
    return {f"{t}/{p}": int(o) for t, parts in value.items() if isinstance(parts, dict) for p, o in parts.items()}


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if f != f else f


def kafka_lag(progress: dict[str, Any]) -> KafkaLag | None:
    """The lag of the progress's Kafka sources (summed), or None when it has none."""
    total, ends, avg, worst, found = 0, {}, None, None, False
    for src in progress.get("sources") or []:
        if not str(src.get("description", "")).startswith("KafkaV2"):
            continue
        found = True
        end, latest = _offsets(src.get("endOffset")), _offsets(src.get("latestOffset"))
        ends.update(end)
        total += sum(max(0, latest[tp] - end.get(tp, 0)) for tp in latest)
        metrics = src.get("metrics") or {}
        avg = _num(metrics.get("avgOffsetsBehindLatest"))
        m = _num(metrics.get("maxOffsetsBehindLatest"))
        worst = None if m is None else int(m)
    return KafkaLag(total, ends, avg, worst) if found else None


class TopicBacklog:
    """The agent's backlog for a Kafka stage, in the file backlog's shape: no files, the lag in
    rows. Updated from each progress of the main query; None until its first one."""

    def __init__(self) -> None:
        self.last: KafkaLag | None = None

    def update(self, progress: dict[str, Any]) -> KafkaLag | None:
        lag = kafka_lag(progress)
        if lag is not None:
            self.last = lag
        return lag

    def partitions(self) -> int | None:
        """The topic's partitions as the last batch saw them: the policies' bound on useful cores."""
        return None if self.last is None else len(self.last.end_offsets)

    def seen(self) -> int:
        return 0

    def files_of(self, batch_id: int) -> int | None:
        return None

    def measure(self, rows_per_file: float | None = None) -> Backlog:
        return Backlog(files=None, rows=None if self.last is None else self.last.records)
