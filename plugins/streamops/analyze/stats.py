"""A stage's window of metrics, aggregated, and the figures derived from it.

The window aggregate is computed set-based in SQL for every stage at once
(`sql/queries/stage_windows.sql`), or by the simulator's model; the derivations here are pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StageStats:
    """Aggregates over a stage's recent window (default 2 min, stabilization after a restart excluded)."""

    stage_id: str
    app: str
    pool: str
    cores: int
    min_cores: int
    max_cores: int
    state_partitions: int
    span_s: float  # wall time the window covers
    batches: int
    input_rows: int
    busy_ms: float  # sum of batch durations: time the stage was processing
    backlog_rows: float  # at the end of the window
    backlog_growth_rps: float  # backlog slope over the window (rows/s; > 0 = falling behind)
    latency_p95_ms: float | None  # worst batch p95 in the window
    state_bytes: float = 0.0
    host_cpu: float | None = None  # U_r: CPU utilization of the pool's hosts, 0..1
    host_mem: float | None = None  # memory utilization of the pool's hosts, 0..1
    busy_source: str = "batch_busy"  # how busy_ms was measured: batch_busy | executor_tasks
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    forecast_rate: float | None = None  # forecast peak input rate (rows/s) over the horizon (analyze.forecast)
    forecast_path: tuple[float, ...] = ()  # the forecast rate per bucket ahead, from the bucket in progress
    forecast_sd: float | None = None  # its spread one bucket ahead (analyze.forecast.innovation_sd)
    forecast_skill: float | None = None  # its recent error over the naive forecast's (analyze.season); None: unknown
    forecast_season_s: float = 0.0  # the season the forecast used (learned, analyze.season); 0: none
    # Tasks the source can feed at once (a Kafka topic's partitions, or source.min_partitions
    # when it splits them); None: no such bound (files).
    max_useful_cores: int | None = None
    # Rows/s arriving over the last `recent_s` only (processed + backlog growth): a surge shows in
    # it within seconds, in the window's mean only as the window fills. None: not measured.
    recent_arrival_rate: float | None = None
    # A stage fed by another stage of its app: the rows/s that one receives × its measured
    # selectivity, so that a surge sizes the whole chain at once (DS2's propagation). None: the
    # stage reads its own source (every stage in production today; the simulator's app is a chain).
    upstream_arrival_rate: float | None = None

    @property
    def input_rate(self) -> float:
        return self.input_rows / self.span_s if self.span_s > 0 else 0.0

    @property
    def arrival_rate(self) -> float:
        """Rows/s arriving: those processed plus the backlog's growth. A stage that falls behind
        processes at its capacity, so its input rate alone understates the load it must serve. The
        most of the window's figure, the recent one and its upstream's: a rise counts at once, a
        fall only once the window shows it."""
        window = self.input_rate + self.backlog_growth_rps
        return max(0.0, window, self.recent_arrival_rate or 0.0, self.upstream_arrival_rate or 0.0)

    @property
    def core_cap(self) -> int:
        """The most cores a policy may ask for: max_cores, or fewer when the source cannot feed them."""
        if self.max_useful_cores is None:
            return self.max_cores
        return max(self.min_cores, min(self.max_cores, self.max_useful_cores))


def useful_cores(source_partitions: int | None, min_partitions: int | None) -> int | None:
    """Spark tasks a Kafka source reads in: one per partition, or min_partitions when it asks for
    more (Spark splits the offset ranges); None when the partitions are not known (files, or no
    batch yet)."""
    if source_partitions is None:
        return None
    return max(source_partitions, min_partitions or 0)


def busy_fraction(s: StageStats) -> float:
    """S: busy time over wall time. With `batch_busy` every replica (core) of a local[n] driver
    is counted busy while a batch runs, so this is per replica too (EDF's S_alpha)."""
    if s.span_s <= 0:
        return 0.0
    return min(1.0, s.busy_ms / (s.span_s * 1000.0))


def true_rate_per_core(s: StageStats) -> float | None:
    """DS2's true processing rate: rows per busy core-second. None without busy time."""
    busy_core_s = s.busy_ms / 1000.0 * s.cores
    if busy_core_s <= 0 or s.input_rows <= 0:
        return None
    return s.input_rows / busy_core_s


def ds2_target(s: StageStats, catch_up_s: float = 60.0, target_utilization: float = 0.7,
               input_rate: float | None = None) -> int:
    """n* = ceil((input_rate + backlog / catch_up_s) / (rate_per_core × target_utilization)), clamped
    to [min_cores, core_cap].
    `input_rate` replaces the measured one as the demand (a forecast); the rate per core stays measured."""
    rate = true_rate_per_core(s)
    if rate is None:
        return s.cores
    need = _rows_to_serve(s, catch_up_s, input_rate) / (rate * target_utilization)
    return max(s.min_cores, min(s.core_cap, math.ceil(need - 1e-9)))


def load_ratio(s: StageStats, catch_up_s: float = 60.0, input_rate: float | None = None) -> float:
    """Demand over capacity: (input + backlog catch-up) / (rate per core × cores). > 1 = overloaded.
    `input_rate` replaces the measured one as the demand (a forecast)."""
    rate = true_rate_per_core(s)
    if rate is None:
        return 0.0
    return _rows_to_serve(s, catch_up_s, input_rate) / (rate * s.cores)


def _rows_to_serve(s: StageStats, catch_up_s: float, input_rate: float | None) -> float:
    """Rows/s to serve: the input (measured, or `input_rate`) plus the backlog caught up in `catch_up_s`."""
    return (s.input_rate if input_rate is None else input_rate) + max(0.0, s.backlog_rows) / catch_up_s
