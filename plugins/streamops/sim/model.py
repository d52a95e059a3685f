"""The simulator's configuration: the app's stages and the execution model.

Every number here is ours (the papers give none for a simulator); all are overridable through
`run_simulation(..., **overrides)`. docs/policies.md ("The simulator") describes the model.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from typing import Any

from streamops.plan.options import OperatorOptions
from streamops.plan.start_size import StartInputs, start_size
from streamops.registry import Fault, Redundancy


@dataclass(frozen=True)
class StageSpec:
    """One stage of the chain. capacity = cores × rate_per_core rows/s."""

    name: str
    rate_per_core: float = 100.0
    cores: int = 2  # initial
    min_cores: int = 1
    max_cores: int = 8
    state_bytes: float = 0.0
    base_latency_ms: float = 30.0  # processing latency of an unloaded, backlog-free stage
    selectivity: float = 1.0  # output rows per input row: what the next stage receives
    state_partitions: int = 8
    # High availability (sim/ha.py), the shape of registry.Stage's fields of the same names:
    replicas: int = 1  # independent copies of the stage, each with `cores`
    redundancy: Redundancy | None = field(default=None, hash=False)  # the manager sets the replicas
    faults: tuple[Fault, ...] = ()  # the fault injector's schedule (sim/faults.py)
    # Micro-batches (docs/policies.md §11.4, fitted by sim/calibrate.py): all 0 is the fluid model.
    trigger_interval_s: float = 0.0  # a batch starts at most this often
    batch_overhead_ms: float = 0.0  # fixed cost of a batch (planning, commit), on top of rows / (cores × rate)
    max_batch_rows: float = 0.0  # rows one batch takes at most (maxFilesPerTrigger); 0: unlimited

    def __post_init__(self) -> None:
        # dicts (from JSON, run_simulation(stages=[{...}])) become the registry's models
        faults = tuple(f if isinstance(f, Fault) else Fault.model_validate(f) for f in self.faults)
        object.__setattr__(self, "faults", faults)
        red: Redundancy | bool | dict[str, Any] | None = self.redundancy  # JSON gives a bool or a dict
        if red is True:
            red = Redundancy()
        elif red is False:
            red = None
        elif isinstance(red, dict):
            red = Redundancy.model_validate(red)
        object.__setattr__(self, "redundancy", red)
        if isinstance(self.replicas, bool) or not isinstance(self.replicas, int) or self.replicas < 1:
            raise ValueError(f"stage {self.name!r}: replicas must be an int >= 1, got {self.replicas!r}")

    @property
    def capacity(self) -> float:
        return self.cores * self.rate_per_core

    @property
    def micro_batch(self) -> bool:
        return self.trigger_interval_s > 0 or self.batch_overhead_ms > 0 or self.max_batch_rows > 0


def batch_capacity(sp: StageSpec, cap: float, avail: float, inflow: float) -> tuple[float, float]:
    """A second's capacity and the duration (s) of the batch that takes the rows pending now.

    Fluid stage (no micro-batch fields): `cap` (cores × rate × noise × up) as is, duration 0.
    Micro-batch: a batch takes n = the rows pending, at least a trigger interval's arrivals, at
    most max_batch_rows; it lasts D = overhead + n / cap and starts every T_b = max(trigger, D)
    seconds, so a second has cap · (1 − overhead / T_b) for rows, and at most n / T_b."""
    if not sp.micro_batch:
        return cap, 0.0
    if cap <= 0:
        return 0.0, sp.batch_overhead_ms / 1000.0
    n = max(avail, inflow * sp.trigger_interval_s)
    if sp.max_batch_rows > 0:
        n = min(n, sp.max_batch_rows)
    o = sp.batch_overhead_ms / 1000.0
    dur = o + n / cap
    t_b = max(sp.trigger_interval_s, dur)
    eff = cap * (1.0 - o / t_b)
    if sp.max_batch_rows > 0:
        eff = min(eff, sp.max_batch_rows / t_b)
    return eff, dur


@dataclass(frozen=True)
class ScriptedChange:
    """A reconfiguration (or a failure's restart) of a real run, replayed as it happened
    (SimConfig.scripted): no policy decides it. The stage's output stops at down_start_s (default
    t_s) for downtime_s, then it runs with to_cores."""

    t_s: float
    stage: str
    to_cores: int
    downtime_s: float
    mechanism: str = "pause_resume"
    action: str = "scale_out"
    down_start_s: float | None = None


# EDF's DEBS top-10 routes query cut at its stateful operator: parse+filter+route id → windowed
# count → top-10. At their initial cores every stage is overloaded by the diurnal peak
# (300 rows/s) and nearly idle at night (30 rows/s).
DEFAULT_STAGES: tuple[StageSpec, ...] = (
    StageSpec("parse", rate_per_core=130.0, cores=2, min_cores=1, max_cores=12, state_bytes=0.0, base_latency_ms=20.0),
    StageSpec("count", rate_per_core=100.0, cores=2, min_cores=1, max_cores=12, state_bytes=200e6,
              base_latency_ms=40.0),
    StageSpec("top10", rate_per_core=220.0, cores=1, min_cores=1, max_cores=12, state_bytes=10e6, base_latency_ms=20.0),
)

SIM_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class SimConfig:
    # --- the app (plan.application.AppView) ---
    app: str = "taxi"
    stages: tuple[StageSpec, ...] = DEFAULT_STAGES
    r_max_ms: float = 200.0  # EDF ran with R_max = 200 ms
    slo_target: float = 0.99  # share of seconds within R_max: the registry's default; mpc's price follows its budget
    # The maintenance window, in simulated time: 30 min every 2 h centred on the diurnal
    # trough (the compressed "night" at t = 2 h, 4 h …).
    window_cron: str = "45 1-23/2 * * *"
    window_minutes: float = 30.0
    window_max_actions: int = 3
    # --- load and service noise (per second, Gaussian, relative sd) ---
    arrival_noise: float = 0.05
    capacity_noise: float = 0.05
    # --- latency model ---
    queue_ms: float = 7.0  # utilization term queue_ms·ρ/(1−ρ), ρ capped at rho_cap
    rho_cap: float = 0.95
    # --- what the Operator Manager sees ---
    host_mem: float = 0.3  # U_mem, constant
    # pools besides "local": name → (cores, delay_ms to local); none = no migration
    pools: dict[str, Sequence[float]] = field(default_factory=dict)
    # --- reconfiguration mechanisms (downtimes in seconds, lognormal: median, sigma) ---
    # active_backup: the pools have room for the new run beside the old one, and production's rule
    # (sim/mechanism.py) picks active_backup for scale-outs and migrations; pause_resume: no room
    mechanism: str = "pause_resume"
    # local: each driver's local[N] is fixed at start, every change restarts it; standalone: the
    # stages run on a cluster pool of 1-core executors, and a change within the state partitions
    # is made live (no outage), a live scale-in without a maintenance window (issue 46 item 4)
    pool_kind: str = "local"
    pause_resume_median_s: float = 10.0
    prestaged_median_s: float = 5.0
    active_backup_median_s: float = 0.5
    downtime_sigma: float = 0.3
    state_s_per_mb: float = 0.005  # offline repartition / copy cost of the state, pause-resume only
    migrate_extra_median_s: float = 5.0  # copying the checkpoint to the other pool
    overlap_median_s: float = 20.0  # active backup: secondary catching up, double cores
    prestage_s: float = 8.0  # copy + repartition of the staged checkpoint before it can be used
    # --- faults and replicas (sim/faults.py, sim/ha.py) ---
    restart_s: float = 10.0  # a killed driver restarts from its checkpoint in this long ([002]: Heron 10.8 s)
    executor_restart_s: float = 5.0  # an executor kill costs one core for this long
    heartbeat_timeout_s: float = 15.0  # the supervisor kills a driver silent for 3 heartbeats of 5 s
    # (start_s, end_s) windows in which faults strike; none = the whole run
    fault_periods: tuple[tuple[float, float], ...] = ()
    # --- measurement ---
    response_stat: str = "p95"  # p95 | mean: the response the Application Manager gets per interval
    settle_s: float = 120.0  # convergence: response ≤ R_max for this long
    withdraw_stale: bool = True  # an open request its operator stopped proposing is withdrawn
    # A replay of a real run (sim/calibrate.py): these changes (none: ()) happen instead of the
    # managers' decisions; None runs the managers.
    scripted: tuple[ScriptedChange, ...] | None = None
    # Managed runs start each stage where production would (plan.start_size, `sized_start`), not
    # at StageSpec.cores, which is then the floor as cores.initial is; a scripted replay starts as recorded.
    sized_start: bool = True
    start: datetime = SIM_EPOCH
    plot: bool = True

    def __post_init__(self) -> None:
        if self.mechanism not in ("pause_resume", "active_backup"):
            raise ValueError(f"mechanism must be pause_resume or active_backup, got {self.mechanism!r}")
        if self.pool_kind not in ("local", "standalone"):
            raise ValueError(f"pool_kind must be local or standalone, got {self.pool_kind!r}")
        if self.response_stat not in ("p95", "mean"):
            raise ValueError(f"response_stat must be p95 or mean, got {self.response_stat!r}")
        if not self.stages:
            raise ValueError("an app needs at least one stage")
        if min(self.restart_s, self.executor_restart_s, self.heartbeat_timeout_s) < 0:
            raise ValueError("restart_s, executor_restart_s and heartbeat_timeout_s must be >= 0")
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stage names must be unique: {names}")

    @classmethod
    def field_names(cls) -> set[str]:
        return {f.name for f in fields(cls)}

    def with_overrides(self, **kw: Any) -> SimConfig:
        if "stages" in kw:
            kw["stages"] = tuple(s if isinstance(s, StageSpec) else StageSpec(**s) for s in kw["stages"])
        if "fault_periods" in kw:
            kw["fault_periods"] = tuple((float(a), float(b)) for a, b in kw["fault_periods"])
        if kw.get("scripted") is not None:
            kw["scripted"] = tuple(c if isinstance(c, ScriptedChange) else ScriptedChange(**c) for c in kw["scripted"])
        return replace(self, **kw)


def lognormal(rng: random.Random, median: float, sigma: float) -> float:
    if median <= 0:
        return 0.0
    return rng.lognormvariate(math.log(median), sigma)


def sized_start(cfg: SimConfig, rows_s: float, opts: OperatorOptions) -> SimConfig:
    """`cfg` with each stage's starting cores chosen as production chooses a start (plan.start_size):
    for the rows/s that reach it (`rows_s` into the first stage, times each selectivity on the
    way), at its declared rate per core and the policy's `catch_up_s` and `target_utilization`,
    floored at StageSpec.cores and capped at max_cores. The simulated app has run before its first
    second, so its input rate is a measured one."""
    if not cfg.sized_start or cfg.scripted is not None:
        return cfg
    stages, load = [], max(0.0, rows_s)
    for s in cfg.stages:
        n = start_size(StartInputs(initial=s.cores, max_cores=s.max_cores, input_rate=load,
                                   rate_per_core=s.rate_per_core, rate_per_core_declared=True),
                       opts.catch_up_s, opts.target_utilization).cores
        stages.append(replace(s, cores=n))
        load *= s.selectivity
    return replace(cfg, stages=tuple(stages))
