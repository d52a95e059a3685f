"""The clairvoyant bound's programme (issue 29): its planning model and the dynamic programme
over (interval, configuration, tokens) that finds the optimal schedule at one price. sim/bound.py
searches the frontier with it. Pure: per-second input rates + a `BoundModel` → a `Problem`.

The planning model keeps what decides cores against violations in sim/engine.py and drops the rest:
- Time is cut into control intervals of `window_s` (the Application Manager's cycle). A
  configuration is one core count per stage, chosen at an interval's start, as the AM grants.
- Configuration v sustains λ*(v): the highest input rate at which the chain's steady response
  Σ_k base_k + queue_ms·ρ_k/(1 − ρ_k) (ρ_k capped at rho_cap, every ρ_k < 1) is ≤ R_max. A second
  of rate r is above R_max with the chance that the second's noise (the simulator's per-second
  arrival and service noise, which no one can foresee: the trace itself is known) takes the
  arrivals past the service, P(r·(1 + ε_a) > λ*(v)·(1 + ε_c)); without noise, when r > λ*(v).
  Backlog carried from one second to the next is dropped: it only adds seconds above R_max.
- A change restarts the changed stages together: the app is down for the longest of their
  downtimes d, and the outage's backlog drains at the new configuration's spare capacity, so the
  change costs d / (1 − λ/c(v)) seconds above R_max (at most the interval), c(v) the chain's
  capacity. Scale-outs use the pre-staged restart (a clairvoyant always stages in time) or the
  active backup, whose overlap holds the new cores twice; scale-ins are pause-resumes plus the
  state's offline repartition.
- The token bucket: a scale-out of k stages spends k tokens of a bucket of capacity B that gains
  one token per interval (the generator's most: a relaxation).
- Maintenance windows: scale-ins only at intervals that start in an open window, at most
  `window_max_actions` stages at once (the window's budget across intervals is relaxed).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

INF = math.inf


@dataclass(frozen=True)
class BoundStage:
    name: str
    rate_per_core: float
    base_latency_ms: float
    cores: int  # the initial configuration
    min_cores: int
    max_cores: int
    scale_out_s: float  # output gap of a scale-out
    scale_in_s: float  # output gap of a scale-in (pause-resume and the state's repartition)
    overlap_s: float = 0.0  # a scale-out's seconds with the old and the new cores both held (active backup)
    load: float = 1.0  # input rows per source row that reach this stage (the upstream selectivities)


@dataclass(frozen=True)
class BoundModel:
    stages: tuple[BoundStage, ...]
    r_max_ms: float
    queue_ms: float = 7.0
    rho_cap: float = 0.95
    window_s: int = 60  # the control interval
    tokens: int = 1  # bucket capacity B, whole tokens
    initial_tokens: int = 1
    window_max_actions: int = 3
    # Configurations kept per total core count, by λ*: the best few carry every frontier point in
    # practice; None keeps every vector (the brute-force tests).
    per_total: int | None = 4
    arrival_sd: float = 0.0  # relative per-second noise of the arrivals (SimConfig.arrival_noise)
    capacity_sd: float = 0.0  # … and of the service (SimConfig.capacity_noise)

    def __post_init__(self) -> None:
        if not self.stages:
            raise ValueError("a bound needs at least one stage")
        if self.window_s < 1 or self.tokens < 0 or self.initial_tokens < 0:
            raise ValueError("expected window_s >= 1, tokens >= 0 and initial_tokens >= 0")
        for s in self.stages:
            if not 1 <= s.min_cores <= s.cores <= s.max_cores:
                raise ValueError(f"stage {s.name}: expected 1 <= min_cores <= cores <= max_cores")



# ----------------------------------------------------------------------------------------- model
def sustained_rate(cores: np.ndarray, model: BoundModel) -> np.ndarray:
    """λ*(v) per configuration (rows of `cores`): the highest source rate the chain serves within
    R_max; −1 when even an idle chain's base latency is above R_max."""
    mu = np.array([s.rate_per_core / s.load for s in model.stages])
    cap = cores * mu  # source rows/s each stage serves
    base = sum(s.base_latency_ms for s in model.stages)
    if base > model.r_max_ms:
        return np.full(len(cores), -1.0)
    lo, hi = np.zeros(len(cores)), cap.min(axis=1)
    for _ in range(60):
        mid = (lo + hi) / 2
        rho = np.minimum(mid[:, None] / cap, model.rho_cap)
        ok = base + (model.queue_ms * rho / (1 - rho)).sum(axis=1) <= model.r_max_ms
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return lo


def configurations(model: BoundModel) -> np.ndarray:
    """The configurations the programme considers: the initial one plus, per total core count,
    the `per_total` with the highest λ* (all of them with per_total None)."""
    ranges = [range(s.min_cores, s.max_cores + 1) for s in model.stages]
    allv = np.array(list(itertools.product(*ranges)), dtype=int)
    init = tuple(s.cores for s in model.stages)
    if model.per_total is None:
        return allv
    lam = sustained_rate(allv, model)
    keep = {init}
    for n in np.unique(allv.sum(axis=1)):
        idx = np.flatnonzero(allv.sum(axis=1) == n)
        best = idx[np.argsort(-lam[idx], kind="stable")][:model.per_total]
        keep.update(tuple(int(c) for c in allv[i]) for i in best)
    return np.array(sorted(keep), dtype=int)


@dataclass
class Problem:
    """A trace and a model, ready for the programme: everything that does not depend on the price
    (`prepare`)."""

    V: np.ndarray  # (S, K) configurations
    init: int
    lam: np.ndarray  # (S,) λ*
    cap: np.ndarray  # (S,) the chain's capacity, source rows/s
    ups: np.ndarray  # (S, S) stages scaled out from i to j
    downs: np.ndarray  # (S, S) stages scaled in
    down_s: np.ndarray  # (S, S) the app's output gap of the change
    extra_core_s: np.ndarray  # (S, S) overlap cores of the change
    widths: np.ndarray  # (W,) seconds per interval
    above: np.ndarray  # (W, S) seconds above R_max per interval at configuration j, no change
    mean_rate: np.ndarray  # (W,)
    open_: np.ndarray  # (W,) a scale-in may be granted at the interval's start


def prepare(rates: Sequence[float], model: BoundModel, window_open: Sequence[bool] | None) -> Problem:
    """The programme's tables for a trace (rows/s per second) and the maintenance windows (per
    interval: open at its start; None: always open)."""
    r = np.asarray(rates, dtype=float)
    if r.ndim != 1 or not len(r):
        raise ValueError("the bound needs a non-empty series of per-second rates")
    V = configurations(model)
    init = int(np.flatnonzero((V == np.array([s.cores for s in model.stages])).all(axis=1))[0])
    lam = sustained_rate(V, model)
    mu = np.array([s.rate_per_core / s.load for s in model.stages])
    cap = (V * mu).min(axis=1)
    diff = V[None, :, :] - V[:, None, :]  # [i, j, k] = j_k − i_k
    ups, downs = (diff > 0).sum(axis=2), (diff < 0).sum(axis=2)
    d_out = np.array([s.scale_out_s for s in model.stages])
    d_in = np.array([s.scale_in_s for s in model.stages])
    down_s = np.maximum((diff > 0) * d_out, (diff < 0) * d_in).max(axis=2)
    overlap = np.array([s.overlap_s for s in model.stages])
    extra = ((diff > 0) * V[None, :, :] * overlap).sum(axis=2)
    W = model.window_s
    n = int(math.ceil(len(r) / W))
    widths = np.array([min(W, len(r) - w * W) for w in range(n)], dtype=float)
    above = np.zeros((n, len(V)))
    mean = np.zeros(n)
    for w in range(n):
        seg = r[w * W:(w + 1) * W]
        above[w] = _seconds_above(seg, lam, model.arrival_sd, model.capacity_sd)
        mean[w] = seg.mean()
    if window_open is None:
        open_ = np.ones(n, dtype=bool)
    else:
        open_ = np.asarray(window_open, dtype=bool)
        if len(open_) != n:
            raise ValueError(f"window_open has {len(open_)} intervals, the trace {n}")
    return Problem(V, init, lam, cap, ups, downs, down_s, extra, widths, above, mean, open_)


def _seconds_above(rates: np.ndarray, lam: np.ndarray, arrival_sd: float, capacity_sd: float) -> np.ndarray:
    """Per configuration: the expected seconds of `rates` above R_max, Σ_s P(r·(1+ε_a) > λ*·(1+ε_c))."""
    from scipy.special import ndtr  # type: ignore[import-untyped]  # the normal CDF, vectorized

    if arrival_sd <= 0 and capacity_sd <= 0:
        seg = np.sort(rates)
        return len(seg) - np.searchsorted(seg, lam, side="right")
    r, lm = rates[:, None], lam[None, :]
    sd = np.sqrt((r * arrival_sd) ** 2 + (lm * capacity_sd) ** 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(sd > 0, (r - lm) / sd, np.where(r > lm, np.inf, -np.inf))
    out: np.ndarray = ndtr(z).sum(axis=0)
    return out


def _interval_cost(pb: Problem, w: int) -> tuple[np.ndarray, np.ndarray]:
    """(core-seconds, seconds above R_max) of entering interval w at configuration j from i: (S, S)."""
    width = pb.widths[w]
    core_s = pb.V.sum(axis=1)[None, :] * width + pb.extra_core_s
    rho = pb.mean_rate[w] / np.maximum(pb.cap, 1e-12)
    drain = np.where(rho < 1, 1.0 / np.maximum(1e-12, 1.0 - rho), 1e12)  # overloaded: the whole interval
    change = pb.down_s * drain[None, :]
    return core_s, np.minimum(width, pb.above[w][None, :] + change)


def solve(pb: Problem, model: BoundModel, wc: float, wv: float) -> tuple[float, float, int, list[int]]:
    """Minimize wc·core-seconds + wv·seconds above R_max: (core-s, seconds above, changes, schedule)."""
    S, B, n = len(pb.V), model.tokens, len(pb.widths)
    K = len(model.stages)
    # The first interval runs the initial configuration: the first grant comes at its end.
    J = np.full((S, B + 1), INF)
    t0 = min(B, model.initial_tokens)
    J[pb.init, t0] = wc * pb.V[pb.init].sum() * pb.widths[0] + wv * min(pb.widths[0], pb.above[0][pb.init])
    back = np.zeros((n, S, B + 1), dtype=np.int64)
    by_ups = [pb.ups == u for u in range(K + 1)]
    for w in range(1, n):
        core_s, viol = _interval_cost(pb, w)
        cost = wc * core_s + wv * viol
        if pb.open_[w]:
            cost = np.where(pb.downs <= model.window_max_actions, cost, INF)
        else:
            cost = np.where(pb.downs == 0, cost, INF)
        newJ = np.full((S, B + 1), INF)
        for tau in range(B + 1):
            if not np.isfinite(J[:, tau]).any():
                continue
            avail = min(B, tau + 1)
            for u in range(min(avail, K) + 1):
                m = np.where(by_ups[u], J[:, tau][:, None] + cost, INF)
                best_i = m.argmin(axis=0)
                val = m[best_i, np.arange(S)]
                t1 = avail - u
                better = val < newJ[:, t1]
                newJ[:, t1] = np.where(better, val, newJ[:, t1])
                back[w, :, t1] = np.where(better, best_i * (B + 1) + tau, back[w, :, t1])
        J = newJ
    j, t_end = np.unravel_index(int(np.argmin(J)), J.shape)
    path, tau = [int(j)], int(t_end)
    for w in range(n - 1, 0, -1):
        prev = int(back[w, path[-1], tau])
        path.append(prev // (B + 1))
        tau = prev % (B + 1)
    path.reverse()
    return evaluate(pb, path)


def evaluate(pb: Problem, path: list[int]) -> tuple[float, float, int, list[int]]:
    core = float(pb.V[path[0]].sum() * pb.widths[0])
    viol = float(min(pb.widths[0], pb.above[0][path[0]]))
    changes = 0
    for w in range(1, len(path)):
        c, v = _interval_cost(pb, w)
        i, j = path[w - 1], path[w]
        core += float(c[i, j])
        viol += float(v[i, j])
        changes += int(pb.ups[i, j] + pb.downs[i, j])
    return core, viol, changes, path


def schedule_cost(pb: Problem, model: BoundModel, schedule: Sequence[Sequence[int]]) -> tuple[float, float]:
    """(core-hours, seconds above R_max) of a given per-interval schedule, in the bound's model;
    raises ValueError when it breaks the bucket or the windows (the brute-force tests)."""
    index = {tuple(int(c) for c in v): i for i, v in enumerate(pb.V)}
    path = [index[tuple(v)] for v in schedule]
    if path[0] != pb.init:
        raise ValueError("a schedule starts at the initial configuration")
    tokens = min(model.tokens, model.initial_tokens)
    for w in range(1, len(path)):
        i, j = path[w - 1], path[w]
        avail = min(model.tokens, tokens + 1)
        if pb.ups[i, j] > avail:
            raise ValueError(f"interval {w}: {pb.ups[i, j]} scale-outs with {avail} tokens")
        if pb.downs[i, j] and (not pb.open_[w] or pb.downs[i, j] > model.window_max_actions):
            raise ValueError(f"interval {w}: a scale-in outside a window or beyond its budget")
        tokens = avail - int(pb.ups[i, j])
    core, viol, _, _ = evaluate(pb, path)
    return core / 3600.0, viol
