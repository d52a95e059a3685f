"""One simulated second of one stage (the model in sim/engine.py's docstring): the share of the
second a reconfiguration leaves each replica, each replica's batch, backlog and latency, and the
frontier the stage writes (its furthest-ahead replica's). The engine steps the stages along the
chain and keeps the totals; this module writes the stage's own series for second t."""

from __future__ import annotations

import math
import random
from typing import NamedTuple

from streamops.sim.faults import Replica
from streamops.sim.model import SimConfig, batch_capacity
from streamops.sim.stagerun import Reconfig, StageRun


class ChangeWindow(NamedTuple):
    """What a reconfiguration in progress leaves of [t, t+1): the old cores until the stop,
    nothing while down, the new cores after; and the downtime left at t+1 and at t."""

    old: float
    new: float
    remaining: float
    remaining_at_t: float


class ReplicaSecond(NamedTuple):
    backlog: float  # q' at the end of the second
    written: float
    latency: float
    latency_p90: float
    latency_at_t: float  # of a record arriving at the start of the second
    busy: float
    up: float


class StageSecond(NamedTuple):
    out: float  # rows written (the frontier's advance)
    up: float
    latency: float
    latency_p90: float
    core_seconds: float  # charged for the second, every replica


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def _change_window(p: Reconfig | None, t: int) -> ChangeWindow:
    if p is None:
        return ChangeWindow(0.0, 0.0, 0.0, 0.0)
    return ChangeWindow(old=_overlap(t, t + 1, -math.inf, p.down_start), new=_overlap(t, t + 1, p.down_end, math.inf),
                        remaining=max(0.0, p.down_end - (t + 1)) if p.down_start < t + 1 else 0.0,
                        remaining_at_t=max(0.0, p.down_end - t) if p.down_start <= t else 0.0)


def _replica_uptime(st: StageRun, rp: Replica, w: ChangeWindow, t: int) -> tuple[float, float, float, float]:
    """The replica's effective cores and up share in the second, and the downtime left at t+1 and
    at t, once its own fault blocks and lost executors are taken out of the change's window."""
    p, blocks, remaining, rem_t = st.pending, rp.blocks, w.remaining, w.remaining_at_t
    if p is not None:
        old_frac, new_frac = w.old, w.new
        if blocks:
            old_frac -= blocks.overlap(t, min(t + 1, p.down_start))
            new_frac -= blocks.overlap(max(t, p.down_end), t + 1)
        eff_cores = st.n * old_frac + p.to_cores * new_frac
        up = old_frac + new_frac
    else:
        eff_cores, up = float(st.n), 1.0
        if blocks:
            up = 1.0 - blocks.overlap(t, t + 1)
            eff_cores = st.n * up
    if blocks:
        remaining, rem_t = max(remaining, blocks.remaining(t + 1.0)), max(rem_t, blocks.remaining(float(t)))
    if rp.degraded:
        eff_cores = max(0.0, eff_cores - rp.lost_cores(t))
    return eff_cores, up, remaining, rem_t


def _replica_second(cfg: SimConfig, st: StageRun, rp: Replica, w: ChangeWindow, t: int, inflow: float,
                    noise: float, nominal: float) -> ReplicaSecond:
    """One replica's batch on its own backlog, and the latency of a record arriving now."""
    sp, p = st.spec, st.pending
    eff_cores, up, remaining, rem_t = _replica_uptime(st, rp, w, t)
    avail = rp.q + inflow
    cap, dur = batch_capacity(sp, eff_cores * sp.rate_per_core * noise, avail, inflow)  # fluid: dur = 0
    if sp.micro_batch and (p.down_end < t + 1 if p else st.restart_t == t):  # a restart's first batch lands
        cap += sp.max_batch_rows or avail
    processed = min(avail, cap)
    backlog = avail - processed
    util = min(1.0, avail / cap) if cap > 0 else 0.0
    rho = min(util, cfg.rho_cap)
    queue = sp.base_latency_ms + (1000.0 * dur if sp.micro_batch else cfg.queue_ms * rho / (1.0 - rho))
    base = queue + 1000.0 * remaining
    lat = base + 1000.0 * backlog / nominal
    b90 = rp.q + 0.9 * (backlog - rp.q)
    lat90 = base + 1000.0 * b90 / nominal
    lat_t = queue + 1000.0 * rem_t + 1000.0 * rp.q / nominal
    return ReplicaSecond(backlog, processed, lat, lat90, lat_t, util * up, up)


def _record(st: StageRun, t: int, inflow: float, out: float, backlog: float, fast: ReplicaSecond,
            lat90: float, lat_t: float, up: float) -> float:
    """Write the stage's series for second t; return the core-seconds it is charged."""
    p, h, k = st.pending, st.ha, len(st.ha.replicas)
    lat = fast.latency
    st.arrivals[t], st.processed[t], st.busy[t], st.up[t] = inflow, out, fast.busy, up
    st.backlog[t], st.latency[t], st.latency_p90[t] = backlog, lat, lat90
    st.cores[t] = st.n
    extra = p.to_cores if (p and p.mechanism == "active_backup" and t < st.overlap_until) else 0
    charged = (st.n + extra) * k
    h.core_seconds += charged
    h.n_replicas[t], h.stall[t], h.tail[t] = k, 1.0 - up, max(lat, lat_t)
    h.stalled[t] = out <= 0.0 and st.backlog_now + inflow > 1e-9
    st.backlog_now = backlog
    return charged


def stage_second(cfg: SimConfig, st: StageRun, t: int, inflow: float, noise0: float,
                 ha_rng: random.Random) -> StageSecond:
    """One second of stage `st`, every replica (the first with `noise0`, the others with their own
    draw from `ha_rng`); the stage writes what its furthest-ahead replica wrote and has its
    lowest latency, and is up while any replica processes."""
    p, reps = st.pending, st.ha.replicas
    nominal = (p.to_cores if p else st.n) * st.spec.rate_per_core
    window = _change_window(p, t)
    rows = []
    for i, rp in enumerate(reps):
        noise = noise0 if i == 0 else max(0.0, 1.0 + ha_rng.gauss(0.0, cfg.capacity_noise))
        rows.append(_replica_second(cfg, st, rp, window, t, inflow, noise, nominal))
    pending = st.backlog_now
    if len(rows) == 1:
        lead = fast = rows[0]
        q_lead, lat90, lat_t, up = reps[0].q, lead.latency_p90, lead.latency_at_t, lead.up
    else:
        lead = min(rows, key=lambda r: r.backlog)  # the furthest ahead
        q_lead = reps[rows.index(lead)].q
        fast = min(rows, key=lambda r: r.latency)
        lat90, lat_t, up = min(r.latency_p90 for r in rows), min(r.latency_at_t for r in rows), max(r.up for r in rows)
    # the frontier: what the furthest-ahead replica has written (it never moves back)
    if lead.backlog < pending + inflow:
        out, backlog = max(0.0, lead.written + (pending - q_lead)), lead.backlog
    else:
        out, backlog = 0.0, pending + inflow
    for rp, r in zip(reps, rows, strict=True):
        rp.q = r.backlog
    charged = _record(st, t, inflow, out, backlog, fast, lat90, lat_t, up)
    return StageSecond(out, up, fast.latency, lat90, charged)
