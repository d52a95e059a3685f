"""The simulated run of a calibration replay (sim/calibrate.py) measured as the report measures
the real one (sim/rundata.py): response per window of a batch, backlog when a batch ends, catch-up
after each scripted change. `sim` is the replay's engine.Simulation, one stage.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from streamops.sim.model import StageSpec, batch_capacity


def cores_running(sim: Any, w: int) -> float:
    """The cores of the run that processes in second w (in a restart's last second: the new one's)."""
    st = sim.stages[0]
    return float(st.cores[min(sim.T - 1, w + 1)] if 0 < st.up[w] < 1 else st.cores[w])


def simulated_batches(sim: Any, spec: StageSpec) -> list[tuple[float, float, float, float, float]]:
    """The simulated stage's batches as (start s, end s, rows taken before it, rows it takes, the
    duration it reports): a
    batch starts every max(trigger, duration) seconds while the stage is up and takes the rows
    pending then (at most max_batch_rows). A restart's first batch ran in the outage and lands as
    it ends (engine): it started before, in a window of its own; the next batch starts then, with
    the rows after the first one's."""
    st = sim.stages[0]
    T = sim.T
    arr, done = st.arrivals, st.processed
    a_cum = np.concatenate([[0.0], np.cumsum(arr)])  # rows arrived by second t
    p_cum = np.concatenate([[0.0], np.cumsum(done)])
    hours = np.arange(T + 1, dtype=float)
    restarts = {int(rc.down_end): rc.down_end for rc in sim.reconfigs} if spec.micro_batch else {}
    top = spec.max_batch_rows or math.inf
    out = []
    s = 0.0
    while s < T:
        w = int(s)
        if st.up[w] <= 0 or done[w] <= 0:
            s = w + 1.0
            continue
        cap = cores_running(sim, w) * spec.rate_per_core
        avail = (st.backlog[w - 1] if w > 0 else 0.0) + arr[w]
        _, dur = batch_capacity(spec, cap, avail, arr[w])
        if w in restarts:
            s = max(s, restarts.pop(w))
            first = min(avail, spec.max_batch_rows or avail)
            out.append((w - 1.0, s, float(p_cum[w]), first, dur))
            before = p_cum[w] + first
        else:
            before = float(np.interp(s, hours, p_cum))
        pending = float(np.interp(s, hours, a_cum)) - before
        out.append((s, s + dur, float(before), max(0.0, min(pending, top)), dur))
        s += max(spec.trigger_interval_s, dur, 0.05)
    return out


def simulated_windows(sim: Any, spec: StageSpec) -> dict[int, float]:
    """The simulated stage's response per window, measured as a batch reports it (simulated_batches):
    its p95 latency is the base latency + its duration + how long its oldest rows waited (the FIFO
    queue's age); it speaks for the windows of its trigger interval from the one it started in
    (10_sla.sql)."""
    st = sim.stages[0]
    T = sim.T
    a_cum = np.concatenate([[0.0], np.cumsum(st.arrivals)])
    hours = np.arange(T + 1, dtype=float)
    vals: dict[int, list[float]] = {}
    hold = max(1, int(math.ceil(spec.trigger_interval_s)))
    for at, _, before, _, dur in simulated_batches(sim, spec):
        # the oldest row a batch starting at `at` takes arrived when the arrivals reached the rows
        # taken before it
        tau, w = float(np.interp(before, a_cum, hours)), int(at)
        for h in range(max(0, w), min(T, w + hold)):
            vals.setdefault(h, []).append(spec.base_latency_ms + 1000.0 * dur + 1000.0 * max(0.0, at - tau))
    return {w: sum(v) / len(v) for w, v in vals.items()}


def simulated_backlog(sim: Any, spec: StageSpec) -> list[tuple[float, float]]:
    """(seconds, rows): the simulated backlog when each simulated batch ends (simulated_batches: with
    a predicted outage they are not the real run's batches, so it is sampled at its own), as the
    agent counts it: the rows left over, plus those that arrived during the batch when the next
    trigger is still ahead (the batch took less than a trigger interval); with batches back to
    back the next one has them."""
    st = sim.stages[0]
    out = []
    for _, t, _, _, _ in simulated_batches(sim, spec):
        if t >= sim.T:
            break
        w = max(0, int(t))
        cap = cores_running(sim, w) * spec.rate_per_core
        _, dur = batch_capacity(spec, cap, st.backlog[w] + st.arrivals[w], st.arrivals[w])
        waiting = st.arrivals[w] * dur if spec.micro_batch and dur < spec.trigger_interval_s else 0.0
        out.append((float(t), float(st.backlog[w] + waiting)))
    return out


def catch_up(sim: Any) -> list[float | None]:
    """Per scripted change: seconds from the restart until the backlog is ≤ 1 s of input."""
    st = sim.stages[0]
    out = []
    for rc in sim.reconfigs:
        t0 = int(math.ceil(rc.down_end))
        t = next((u for u in range(t0, sim.T) if st.backlog[u] <= max(1.0, st.arrivals[u])), None)
        out.append(None if t is None else float(t - rc.down_end))
    return out
