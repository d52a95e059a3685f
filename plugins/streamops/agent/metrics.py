"""Pure mapping from a Spark `StreamingQueryProgress` (as JSON) to a `stage_metrics` row, and the
driver's clock offset from the database's that dates it.

No Spark import: the tests drive it from saved progress JSON, and the simulator can too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

# Backlog is measured from the checkpoint (checkpoint_layout).
from streamops.checkpoint_layout import Backlog


@dataclass(frozen=True)
class StageContext:
    """What a run is: identity and configuration that Spark's progress does not carry."""

    stage_id: str
    deployment_id: int | None
    cores: int
    state_partitions: int
    trigger_interval_ms: int


@dataclass(frozen=True)
class SinkStats:
    """Measured by the sink at commit time for one batch."""

    batch_id: int
    rows: int
    committed_at: datetime
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    latency_max_ms: float | None


def _parse_ts(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def _num(v: Any) -> float | None:
    # Spark writes NaN for rates of an empty batch; Postgres wants NULL.
    if v is None:
        return None
    f = float(v)
    return None if f != f else f


def state_operators(progress: dict[str, Any]) -> list[dict[str, Any]]:
    """The query's stateful operators in a progress report: [{operator, partitions}], [] for a
    stateless query."""
    return [{"operator": op.get("operatorName") or "unknown", "partitions": op.get("numShufflePartitions")}
            for op in progress.get("stateOperators") or []]


def progress_to_metrics(
    progress: dict[str, Any],
    ctx: StageContext,
    sink: SinkStats | None = None,
    backlog: Backlog | None = None,
    source_lag: str | None = None,
) -> dict[str, Any]:
    """The row; `source_lag` is a Kafka source's lag as JSON (kafka_lag.KafkaLag.as_json)."""
    durations = progress.get("durationMs") or {}
    ops = progress.get("stateOperators") or []
    observed = (progress.get("observedMetrics") or {}).get("input_quality") or {}
    sink_rows = (progress.get("sink") or {}).get("numOutputRows")
    return {
        "ts": _parse_ts(progress["timestamp"]),
        "stage_id": ctx.stage_id,
        "deployment_id": ctx.deployment_id,
        "run_id": progress["runId"],
        "batch_id": int(progress["batchId"]),
        "input_rows": int(progress.get("numInputRows") or 0),
        "input_rps": _num(progress.get("inputRowsPerSecond")),
        "processed_rps": _num(progress.get("processedRowsPerSecond")),
        "batch_duration_ms": int(durations.get("triggerExecution") or 0),
        "trigger_interval_ms": ctx.trigger_interval_ms,
        "add_batch_ms": durations.get("addBatch"),
        "backlog_files": backlog.files if backlog else None,
        "backlog_rows": backlog.rows if backlog else None,
        "state_rows": sum(int(o.get("numRowsTotal") or 0) for o in ops) if ops else None,
        "state_bytes": sum(int(o.get("memoryUsedBytes") or 0) for o in ops) if ops else None,
        # foreachBatch reports -1 output rows; the sink's own count is the truth.
        "output_rows": sink.rows if sink else (int(sink_rows) if sink_rows not in (None, -1) else None),
        "latency_p50_ms": sink.latency_p50_ms if sink else None,
        "latency_p95_ms": sink.latency_p95_ms if sink else None,
        "latency_max_ms": sink.latency_max_ms if sink else None,
        "quarantined_rows": int(observed.get("malformed") or 0),
        "cores": ctx.cores,
        "state_partitions": ctx.state_partitions,
        "durations": json.dumps(durations),
        "source_lag": source_lag,
    }


class ClockOffset:
    """This driver's wall clock against the database's, learnt from its heartbeats: a beat returns
    the time the database wrote it, and one whose round trip was short (MAX_RTT_S) dates its middle
    to within half of that. Spark's progress timestamps (`stage_metrics.ts`) are the driver's wall
    clock; shifted by the offset they are the database's, as the times they are compared with (the
    commits, `now()` in the status, a change's marks; docs/ha.md, "Clocks")."""

    MAX_RTT_S = 0.25

    def __init__(self) -> None:
        self.offset_s: float | None = None  # the database's time minus this host's; None: not learnt yet

    def observe(self, db_time: datetime, sent_s: float, received_s: float) -> None:
        """One beat: the database's time during it, and this host's time.time() before and after it."""
        if 0 <= received_s - sent_s <= self.MAX_RTT_S:
            self.offset_s = db_time.timestamp() - (sent_s + received_s) / 2

    def to_db(self, t: datetime) -> datetime:
        """A time of this host's wall clock, by the database's (as it is until the first beat)."""
        return t if self.offset_s is None else t + timedelta(seconds=self.offset_s)


def latency_from_event_times(
    committed_ms: float, ets_p05_ms: float | None, ets_p50_ms: float | None, ets_min_ms: float | None
) -> tuple[float | None, float | None, float | None]:
    """Latency percentiles from event-time percentiles: latency = commit − event time, so the
    p95 latency belongs to the 5th-percentile event time and the max to the earliest one."""

    def lat(x: float | None) -> float | None:
        return None if x is None else max(0.0, committed_ms - x)

    return lat(ets_p50_ms), lat(ets_p05_ms), lat(ets_min_ms)
