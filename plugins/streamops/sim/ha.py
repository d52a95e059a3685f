"""High availability in the simulator: replicas, the fault injector and the redundancy manager
(POLICIES.md §6; faults in sim/faults.py, the model of one second in sim/engine.py).

Replicas (active replication [003, 004]). A stage with k replicas runs k independent copies,
each with the stage's cores and its own backlog; all read the same input. The sink keeps the
first write of each key (a version-guarded sink with several writers), so the stage's output
frontier is the furthest-ahead replica's and its latency is the lowest replica's: a fault on one
replica is masked while another is healthy. A reconfiguration (scale-out …) applies to every
replica at once. Replica-hours count a replica from its launch to its removal, restarts and
start-up included (its cores stay reserved); core-hours count every replica's cores.

The redundancy manager (plan.redundancy, [002] Algorithm 2) runs for a stage whose
`redundancy` is enabled: every `period_s` it steps on the p90 of the stage's per-second tail
latency over the last period against `bound_ms` (default the app's R_max), and the stage runs
`replicas_for(r, max_replicas)` replicas. It starts at r = replicas − 1 within [r_min, r_max].
A change of the replica count goes through the Application Manager like any other action: the
manager files an 'add_replica' or 'remove_replica' request (target in
snapshot["target_replicas"]; adding spends a token like a scale-out, removing is free) and the
engine resizes the stage when it is granted. A request no longer wanted is withdrawn.
A new replica replays from the source: it starts with the leader's backlog and processes
nothing for `restart_s` (start-up), then catches up. A removal takes the replica furthest behind.

The manager steps with an `Outlook` (plan.redundancy: the proactive rule and the start-up hold):
the clock, its period, `restart_s` as a new replica's start-up, the times of every fault the
stage's replicas recorded (the fault schedule is per stage, so these are the faults one replica
alone would take), the mean stop of those in the trailing `fault_window_s` (the restart for a
kill, the pause for a slow batch; `restart_s` before any), and the utilization the engine
forecasts for the next period (`utilization`, None: unknown).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streamops.plan.model import ADD_REPLICA, REMOVE_REPLICA, Request
from streamops.plan.redundancy import Outlook, RedundancyOptions, RedundancyState, replicas_for, step
from streamops.sim.faults import Failure, FaultEvent, Replica, fault_schedule, strike
from streamops.sim.model import SimConfig, StageSpec


@dataclass
class Manager:
    opts: RedundancyOptions
    state: RedundancyState
    period: int  # seconds
    max_replicas: int


@dataclass
class StageHA:
    """A stage's replicas, its fault schedule and what happened; arrays are per second."""

    name: str
    bound_ms: float
    events: list[FaultEvent]
    replicas: list[Replica]
    tail: np.ndarray  # the stage's worst response time in the second (ms)
    stall: np.ndarray  # share of the second in which no replica processed
    stalled: np.ndarray  # no output in the whole second while rows were pending
    n_replicas: np.ndarray
    manager: Manager | None = None
    retired: list[Replica] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)
    r_trace: list[tuple[int, float, int]] = field(default_factory=list)  # (t, r, replicas) per period
    core_seconds: float = 0.0
    cursor: int = 0
    next_id: int = 0

    def new_replica(self, t: float, q: float = 0.0) -> Replica:
        rp = Replica(self.next_id, t, q)
        self.next_id += 1
        self.replicas.append(rp)
        return rp

    def violated(self) -> np.ndarray:
        """1-second windows whose tail exceeds the bound, or with the output stalled while rows waited."""
        out: np.ndarray = (self.tail > self.bound_ms) | self.stalled
        return out


def build(spec: StageSpec, cfg: SimConfig, T: int, seed: int) -> StageHA:
    red = spec.redundancy
    bound = float(red.bound_ms) if red is not None and red.bound_ms else float(cfg.r_max_ms)
    k, manager = spec.replicas, None
    if red is not None and red.enabled:
        opts = red.params
        r0 = min(opts.r_max, max(opts.r_min, float(spec.replicas - 1)))
        manager = Manager(opts, RedundancyState(r=r0), max(1, int(round(red.period_s))), red.max_replicas)
        k = replicas_for(r0, red.max_replicas)
    events = fault_schedule(spec.faults, T, seed, spec.name, cfg.fault_periods) if spec.faults else []
    ha = StageHA(spec.name, bound, events, [], np.zeros(T), np.zeros(T), np.zeros(T, dtype=bool), np.zeros(T),
                 manager=manager)
    for _ in range(k):
        ha.new_replica(0.0)
    return ha


def fire_faults(ha: StageHA, t: int, cores: int, cfg: SimConfig) -> None:
    """Strike every fault due in [t, t+1), each on the replica its `pick` names."""
    while ha.cursor < len(ha.events) and ha.events[ha.cursor].t < t + 1:
        e = ha.events[ha.cursor]
        ha.cursor += 1
        rp = ha.replicas[min(len(ha.replicas) - 1, int(e.pick * len(ha.replicas)))]
        ha.failures.append(strike(e, rp, ha.name, cores, cfg.restart_s, cfg.executor_restart_s,
                                  cfg.heartbeat_timeout_s))


def due(ha: StageHA, t: int) -> bool:
    return ha.manager is not None and t > 0 and t % ha.manager.period == 0


def outlook(ha: StageHA, t: int, restart_s: float, utilization: float | None) -> Outlook:
    """The manager's Outlook at t from the failures the stage's replicas recorded so far."""
    m = ha.manager
    period, window = (m.period, m.opts.fault_window_s) if m is not None else (1, 1.0)
    times = [f.t for f in ha.failures if f.t <= t]
    stops = [f.end - f.start for f in ha.failures
             if t - window < f.t <= t and f.start is not None and f.end is not None]
    stop = sum(stops) / len(stops) if stops else (restart_s if not times else 0.0)
    return Outlook(float(t), float(period), restart_s, tuple(times), stop, utilization)


def redundancy_request(ha: StageHA, t: int, app: str, restart_s: float = 0.0,
                       utilization: float | None = None) -> Request | None:
    """One step of Algorithm 2 on the last period's p90 tail, with the stage's Outlook (`outlook`);
    a request when `replicas_for(r)` differs from the replicas the stage runs (None: nothing to
    change)."""
    m = ha.manager
    if m is None:  # a stage without a redundancy manager: due() is never true for it
        return None
    window = ha.tail[max(0, t - m.period):t]
    tail = float(np.percentile(window, 90)) if len(window) else None
    r_before = m.state.r
    m.state, d = step(m.state, tail, ha.bound_ms, m.opts, outlook(ha, t, restart_s, utilization))
    k, target = len(ha.replicas), replicas_for(m.state.r, m.max_replicas)
    ha.r_trace.append((t, m.state.r, target))
    if target == k:
        return None
    action = ADD_REPLICA if target > k else REMOVE_REPLICA
    excess = 0.0 if tail is None else max(0.0, tail / ha.bound_ms - 1.0)
    # gain as the Operator Manager's: the SLO risk a replica takes away, or 0.1 × the share freed
    gain = max(0.01, excess) if action == ADD_REPLICA else 0.1 * (k - target) / k
    snap = {"replicas": k, "target_replicas": target, "r_before": round(r_before, 3), "r": round(m.state.r, 3),
            "tail_p90_ms": None if tail is None else round(tail, 1), "bound_ms": ha.bound_ms}
    return Request(ha.name, action, None, None, round(gain, 4), 0.0, d.reason, snap, app=app)


def resize(ha: StageHA, t: int, r: Request, grant: str, cfg: SimConfig) -> None:
    """Apply a granted replica request: add or remove replicas until the stage runs its target."""
    target = max(1, int(r.snapshot["target_replicas"]))
    while len(ha.replicas) != target:
        before = len(ha.replicas)
        if before < target:
            rp = ha.new_replica(float(t), min(x.q for x in ha.replicas))  # the leader's backlog
            rp.blocks.add(float(t), t + cfg.restart_s)  # start-up: replays from the source
        else:
            rp = max(ha.replicas, key=lambda x: (x.blocks.remaining(float(t)) > 0, x.q, x.id))
            ha.replicas.remove(rp)
            rp.removed = float(t)
            ha.retired.append(rp)
        ha.log.append({"t_s": t, "stage": ha.name, "action": r.action, "replica": rp.id, "replicas_before": before,
                       "replicas": len(ha.replicas), **{k: r.snapshot[k] for k in ("r_before", "r", "tail_p90_ms")},
                       "bound_ms": ha.bound_ms, "requested_t_s": r.snapshot.get("t_s"), "reason": r.reason,
                       "grant": grant})


def finish(ha: StageHA, T: int) -> None:
    """MTTR of each restart (kill → back processing; None if the replica was removed first or
    was still down at the end) and each failure's output gap: the time within its stop in
    which no replica of the stage processed (0 when another replica masked it)."""
    by_id = {rp.id: rp for rp in ha.replicas + ha.retired}
    for f in ha.failures:
        if f.start is None or f.end is None:  # set together: the fault stopped nothing
            continue
        rp = by_id[f.replica]
        if f.restart:
            back = rp.blocks.end_at(f.start)
            gone = rp.removed is not None and rp.removed < back
            f.mttr_s = None if gone or back > T else back - f.start
        gap = 0.0
        for s in range(max(0, int(math.floor(f.start))), min(T, int(math.ceil(f.end)))):
            gap += min(max(0.0, min(s + 1, f.end) - max(s, f.start)), float(ha.stall[s]))
        f.output_gap_s = gap
