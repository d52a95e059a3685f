"""Pure mapping from a Spark `StreamingQueryProgress` (as JSON) to a `stage_metrics` row.

No Spark import: the tests drive it from saved progress JSON, and the simulator can too.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any


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


@dataclass(frozen=True)
class Backlog:
    files: int
    rows: int | None


def _parse_ts(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def _num(v: Any) -> float | None:
    # Spark writes NaN for rates of an empty batch; Postgres wants NULL.
    if v is None:
        return None
    f = float(v)
    return None if f != f else f


def progress_to_metrics(
    progress: dict[str, Any],
    ctx: StageContext,
    sink: SinkStats | None = None,
    backlog: Backlog | None = None,
) -> dict[str, Any]:
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
    }


def latency_from_event_times(
    committed_ms: float, ets_p05_ms: float | None, ets_p50_ms: float | None, ets_min_ms: float | None
) -> tuple[float | None, float | None, float | None]:
    """Latency percentiles from event-time percentiles: latency = commit − event time, so the
    p95 latency belongs to the 5th-percentile event time and the max to the earliest one."""

    def lat(x: float | None) -> float | None:
        return None if x is None else max(0.0, committed_ms - x)

    return lat(ets_p50_ms), lat(ets_p05_ms), lat(ets_min_ms)


class FileSourceBacklog:
    """Files in the input directory that the query has not yet taken into a batch.

    Spark's file source reports no backlog, so count visible files and subtract those recorded
    in the checkpoint's source log (`sources/0/N[.compact]`, one JSON line per file). Log
    files never change once written, so each is read once.
    """

    def __init__(self, input_dir: Path, checkpoint: Path):
        self.input_dir = Path(input_dir)
        self.log_dir = Path(checkpoint) / "sources" / "0"
        self._lines: dict[str, int] = {}

    def seen(self) -> int:
        try:
            names = [n for n in os.listdir(self.log_dir) if not n.startswith(".") and n.split(".")[0].isdigit()]
        except FileNotFoundError:
            return 0
        by_batch = {int(n.split(".")[0]): n for n in names}
        compacts = [b for b, n in by_batch.items() if n.endswith(".compact")]
        base = max(compacts) if compacts else -1
        total = 0
        for b, n in by_batch.items():
            if b >= base:
                if n not in self._lines:
                    lines = (self.log_dir / n).read_text().splitlines()
                    self._lines[n] = sum(1 for line in lines[1:] if line.strip())  # line 0 is "v1"
                total += self._lines[n]
        return total

    def _count(self, name: str) -> int | None:
        """Files listed in the log entry `name` (read once), None if it is not there."""
        if name not in self._lines:
            try:
                lines = (self.log_dir / name).read_text().splitlines()
            except FileNotFoundError:
                return None
            self._lines[name] = sum(1 for line in lines[1:] if line.strip())
        return self._lines[name]

    def _upto(self, batch_id: int, depth: int = 0) -> int | None:
        """Files logged by batches 0 … batch_id (a compaction lists them all)."""
        if batch_id < 0:
            return 0
        whole = self._count(f"{batch_id}.compact")
        if whole is not None:
            return whole
        own = self._count(str(batch_id))
        rest = None if own is None or depth > 100 else self._upto(batch_id - 1, depth + 1)
        return None if rest is None else own + rest

    def files_of(self, batch_id: int) -> int | None:
        """The files batch `batch_id` took: its own log entry, or for a compaction (which lists every
        file up to it) what it adds to the batches before; None when the entries are gone."""
        own = self._count(str(batch_id))
        if own is not None:
            return own
        whole, before = self._count(f"{batch_id}.compact"), self._upto(batch_id - 1)
        return None if whole is None or before is None else max(0, whole - before)

    def _visible(self) -> int:
        try:
            return sum(1 for e in os.scandir(self.input_dir) if e.is_file() and not e.name.startswith((".", "_")))
        except FileNotFoundError:
            return 0

    def measure(self, rows_per_file: float | None = None) -> Backlog:
        files = max(0, self._visible() - self.seen())
        return Backlog(files=files, rows=round(files * rows_per_file) if rows_per_file else None)
