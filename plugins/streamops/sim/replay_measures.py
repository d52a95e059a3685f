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


def simulated_windows(sim: Any, spec: StageSpec) -> dict[int, float]:
    """The simulated stage's response per window, measured as a batch reports it: a batch starts
    every max(trigger, duration) seconds while the stage is up; its p95 latency is the base
    latency + its duration + how long its oldest rows waited (the FIFO queue's age); it speaks for
    the windows of its trigger interval from the one it started in (10_sla.sql)."""
    st = sim.stages[0]
    T = sim.T
    arr, done = st.arrivals, st.processed
    a_cum = np.concatenate([[0.0], np.cumsum(arr)])  # rows arrived by second t
    p_cum = np.concatenate([[0.0], np.cumsum(done)])
    vals: dict[int, list[float]] = {}
    hold = max(1, int(math.ceil(spec.trigger_interval_s)))
    hours = np.arange(T + 1, dtype=float)
    # a restart's first batch ran in the outage and lands as it ends (engine): it started before,
    # in a window of its own; the next batch starts then, with the rows after the first one's
    restarts = {int(rc.down_end): rc.down_end for rc in sim.reconfigs} if spec.micro_batch else {}

    def record(at: float, rows_before: float, dur: float) -> None:
        # the oldest row a batch starting at `at` takes arrived when the arrivals reached the rows
        # taken before it
        tau, w = float(np.interp(rows_before, a_cum, hours)), int(at)
        for h in range(max(0, w), min(T, w + hold)):
            vals.setdefault(h, []).append(spec.base_latency_ms + 1000.0 * dur + 1000.0 * max(0.0, at - tau))

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
            record(w - 1.0, p_cum[w], dur)
            record(s, p_cum[w] + min(avail, spec.max_batch_rows or avail), dur)
        else:
            record(s, float(np.interp(s, hours, p_cum)), dur)
        s += max(spec.trigger_interval_s, dur, 0.05)
    return {w: sum(v) / len(v) for w, v in vals.items()}


def simulated_backlog(sim: Any, spec: StageSpec, at: list[float]) -> list[float]:
    """The simulated backlog when a batch ends at each of `at`, as the agent counts it: the rows
    left over, plus those that arrived during the batch when the next trigger is still ahead (the
    batch took less than a trigger interval); with batches back to back the next one has them."""
    st = sim.stages[0]
    out = []
    for t in at:
        w = min(sim.T - 1, max(0, int(t)))
        cap = cores_running(sim, w) * spec.rate_per_core
        _, dur = batch_capacity(spec, cap, st.backlog[w] + st.arrivals[w], st.arrivals[w])
        waiting = st.arrivals[w] * dur if spec.micro_batch and dur < spec.trigger_interval_s else 0.0
        out.append(float(st.backlog[w] + waiting))
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
