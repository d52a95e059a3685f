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
  arrivals past the service, P(r·(1 + ε_a) + B > λ*(v)·(1 + ε_c)); without noise, when r + B > λ*(v).
  B is the backlog carried from the seconds before, as in the simulator: a fluid queue at the
  chain's capacity c(v) on the trace's rates. A configuration held for h intervals carries what it
  built in them (h up to `backlog_memory_s`); a change inherits what the configuration before it
  built in the previous interval, and drains it with the change's own backlog. Both keep the bound
  a relaxation (less backlog than the simulator, never more); what a change inherits from further
  back, and what it leaves to the intervals after it, are dropped (issue 46, docs/policies.md §14.1).
- A change restarts the changed stages together: the app is down for the longest of their
  downtimes d, and the outage's backlog (and the inherited one, B) drains at the new configuration's
  spare capacity, so the change costs (d·c(v) + B) / (c(v) − λ) seconds above R_max (at most the
  interval), c(v) the chain's capacity. Scale-outs use the pre-staged restart (a clairvoyant
  always stages in time) or the active backup, whose overlap holds the new cores twice; scale-ins
  are pause-resumes plus the state's offline repartition.
- The token bucket: a scale-out of k stages spends k tokens of a bucket of capacity B that gains
  one token per interval (the generator's most: a relaxation).
- Maintenance windows: scale-ins only at intervals that start in an open window, at most
  `window_max_actions` stages at once (the window's budget across intervals is relaxed).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

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
    # How far back a held configuration's backlog is carried (the programme's state grows with it)
    backlog_memory_s: int = 1800

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
    # (M+1, W, S) seconds above R_max in interval w at configuration j, held since the start of
    # interval w − h with no backlog then: what it carries from the h intervals before
    held: np.ndarray
    carry: np.ndarray  # (W, S) backlog left at interval w's end by j, from none at its start
    mean_rate: np.ndarray  # (W,)
    open_: np.ndarray  # (W,) a scale-in may be granted at the interval's start

    @property
    def above(self) -> np.ndarray:
        """(W, S) seconds above R_max per interval at configuration j, with no backlog carried in."""
        out: np.ndarray = self.held[0]
        return out


def prepare(rates: Sequence[float], model: BoundModel, window_open: Sequence[bool] | None) -> Problem:
    """The programme's tables for a trace (rows/s per second) and the maintenance windows (per
    interval: open at its start; None: always open)."""
    r = np.asarray(rates, dtype=float)
    if r.ndim != 1 or not len(r):
        raise ValueError("the bound needs a non-empty series of per-second rates")
    V = configurations(model)
    init = int(np.flatnonzero((np.array([s.cores for s in model.stages]) == V).all(axis=1))[0])
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
    mean = np.array([r[w * W:(w + 1) * W].mean() for w in range(n)])
    memory = min(n - 1, int(math.ceil(model.backlog_memory_s / W)))
    held, carry = _held(r, lam, cap, W, memory, model.arrival_sd, model.capacity_sd)
    if window_open is None:
        open_ = np.ones(n, dtype=bool)
    else:
        open_ = np.asarray(window_open, dtype=bool)
        if len(open_) != n:
            raise ValueError(f"window_open has {len(open_)} intervals, the trace {n}")
    return Problem(V, init, lam, cap, ups, downs, down_s, extra, widths, held, carry, mean, open_)


def _held(r: np.ndarray, lam: np.ndarray, cap: np.ndarray, W: int, memory: int, arrival_sd: float,
          capacity_sd: float) -> tuple[np.ndarray, np.ndarray]:
    """`Problem.held` and `Problem.carry`. Second by second, as the simulator: the backlog B grows by
    r − c(v) (the trace's rate, a fluid: the noise is no one's to foresee) and a second is above
    R_max with P(r·(1+ε_a) + B > λ*·(1+ε_c)): the carried rows count as arrivals."""
    from scipy.special import ndtr  # type: ignore[import-untyped]  # the normal CDF, vectorized

    n, S = int(math.ceil(len(r) / W)), len(lam)
    pad = np.full((n + memory) * W, np.nan)
    pad[:len(r)] = r
    R = pad.reshape(n + memory, W)
    held = np.zeros((memory + 1, n, S))
    carry = np.zeros((n, S))
    B = np.zeros((n, S))  # one row per start interval, all run at once
    starts = np.arange(n)
    noisy = arrival_sd > 0 or capacity_sd > 0
    for h in range(memory + 1):
        acc = np.zeros((n, S))
        for q in range(W):
            x = R[starts + h, q][:, None]
            ok = ~np.isnan(x)
            x = np.where(ok, x, 0.0)
            load = x + B
            if noisy:
                sd = np.sqrt((x * arrival_sd) ** 2 + (lam * capacity_sd) ** 2)
                with np.errstate(divide="ignore", invalid="ignore"):
                    z = np.where(sd > 0, (load - lam) / sd, np.where(load > lam, np.inf, -np.inf))
                p = ndtr(z)
            else:
                p = (load > lam).astype(float)
            acc += np.where(ok, p, 0.0)
            B = np.where(ok, np.maximum(0.0, load - cap), B)
        if h == 0:
            carry = B.copy()
        held[h, h:] = acc[:n - h]  # started at w − h, scored at w
        held[h, :h] = held[0, :h]  # no configuration runs from before the trace: never read
    return held, carry


def _change_cost(pb: Problem, w: int) -> tuple[np.ndarray, np.ndarray]:
    """(core-seconds, seconds above R_max) of changing from i to j at interval w's start: (S, S). The
    app is down for the change's output gap; the rows that came in meanwhile, and the backlog i left
    at the end of interval w − 1, drain at j's spare capacity (the diagonal is no change: `held`)."""
    width = pb.widths[w]
    core_s = pb.V.sum(axis=1)[None, :] * width + pb.extra_core_s
    spare = pb.cap - pb.mean_rate[w]
    with np.errstate(divide="ignore"):
        drain = np.where(spare[None, :] > 0, (pb.down_s * pb.cap[None, :] + pb.carry[w - 1][:, None])
                         / np.maximum(spare[None, :], 1e-12), np.inf)  # overloaded: the whole interval
    return core_s, np.minimum(width, pb.above[w][None, :] + drain)


def solve(pb: Problem, model: BoundModel, wc: float, wv: float) -> tuple[float, float, int, list[int]]:
    """Minimize wc·core-seconds + wv·seconds above R_max: (core-s, seconds above, changes, schedule).
    The state is (configuration, tokens, h): h intervals held before this one, at most M, so that a
    held configuration carries its backlog."""
    S, B, n = len(pb.V), model.tokens, len(pb.widths)
    K, M = len(model.stages), len(pb.held) - 1
    # The first interval runs the initial configuration: the first grant comes at its end.
    J = np.full((S, B + 1, M + 1), INF)
    t0 = min(B, model.initial_tokens)
    J[pb.init, t0, 0] = wc * pb.V[pb.init].sum() * pb.widths[0] + wv * min(pb.widths[0], pb.above[0][pb.init])
    back = np.zeros((n, S, B + 1, M + 1), dtype=np.int32)  # the predecessor: (i·(B+1) + τ)·(M+1) + h
    by_ups = [pb.ups == u for u in range(K + 1)]
    hs = np.arange(M + 1)
    nxt = np.minimum(hs + 1, M)
    cores = pb.V.sum(axis=1)
    for w in range(1, n):
        core_s, viol = _change_cost(pb, w)
        cost = wc * core_s + wv * viol
        if pb.open_[w]:
            cost = np.where(pb.downs <= model.window_max_actions, cost, INF)
        else:
            cost = np.where(pb.downs == 0, cost, INF)
        np.fill_diagonal(cost, INF)  # holding is not a change: it keeps its backlog
        cost_u = [np.where(by_ups[u], cost, INF) for u in range(K + 1)]
        Jmin, hmin = J.min(axis=2), J.argmin(axis=2)
        newJ = np.full((S, B + 1, M + 1), INF)
        hold = wc * cores[:, None] * pb.widths[w] + wv * pb.held[nxt, w, :].T  # (S, h before)
        for tau in range(B + 1):
            if not np.isfinite(J[:, tau]).any():
                continue
            avail = min(B, tau + 1)
            for u in range(min(avail, K) + 1):
                m = Jmin[:, tau][:, None] + cost_u[u]
                best_i = m.argmin(axis=0)
                val = m[best_i, np.arange(S)]
                t1 = avail - u
                better = val < newJ[:, t1, 0]
                newJ[:, t1, 0] = np.where(better, val, newJ[:, t1, 0])
                code = (best_i * (B + 1) + tau) * (M + 1) + hmin[best_i, tau]
                back[w, :, t1, 0] = np.where(better, code, back[w, :, t1, 0])
            cand = J[:, tau, :] + hold
            codes = (np.arange(S)[:, None] * (B + 1) + tau) * (M + 1) + hs[None, :]
            for src, dst in ((slice(0, M), slice(1, M + 1)), (slice(M, M + 1), slice(M, M + 1))):
                better = cand[:, src] < newJ[:, avail, dst]
                newJ[:, avail, dst] = np.where(better, cand[:, src], newJ[:, avail, dst])
                back[w, :, avail, dst] = np.where(better, codes[:, src], back[w, :, avail, dst])
        J = newJ
    j, tau, h = (int(x) for x in np.unravel_index(int(np.argmin(J)), J.shape))
    path = [j]
    for w in range(n - 1, 0, -1):
        prev = int(back[w, path[-1], tau, h])
        path.append(prev // ((B + 1) * (M + 1)))
        tau, h = (prev // (M + 1)) % (B + 1), prev % (M + 1)
    path.reverse()
    return evaluate(pb, path)


def evaluate(pb: Problem, path: list[int]) -> tuple[float, float, int, list[int]]:
    """(core-seconds, seconds above R_max, changes, path) of a schedule, as the programme prices it."""
    M = len(pb.held) - 1
    core = float(pb.V[path[0]].sum() * pb.widths[0])
    viol = float(min(pb.widths[0], pb.above[0][path[0]]))
    changes = h = 0
    for w in range(1, len(path)):
        i, j = path[w - 1], path[w]
        if i == j:
            h = min(h + 1, M)
            core += float(pb.V[j].sum() * pb.widths[w])
            viol += float(pb.held[h, w, j])
            continue
        c, v = _change_cost(pb, w)
        core += float(c[i, j])
        viol += float(v[i, j])
        changes += int(pb.ups[i, j] + pb.downs[i, j])
        h = 0
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
