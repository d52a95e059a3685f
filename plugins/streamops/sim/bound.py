"""The clairvoyant bound (issue 29): knowing the whole trace, the fewest core-hours for each budget
of seconds above R_max, and the fewest seconds above R_max for each budget of core-hours.

Pure: per-second input rates + a `BoundModel` → a `Frontier`. docs/policies.md §14 has the method.

The planning model and its programme are in sim/bound_dp.py.

The optimum is a dynamic programme over (interval, configuration, tokens). Two objectives make a
frontier: `supported` finds every supported point (the minimizers of core-seconds + p × seconds
above R_max over all prices p ≥ 0) by dichotomic search, about two programmes per point, with no
cap on their number.
Between two supported points the frontier is the straight line: the lower convex envelope, itself
a bound on any schedule (each point of the model lies on or above every supporting line).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from streamops.sim.bound_dp import (
    INF,
    BoundModel,
    BoundStage,
    Problem,
    configurations,
    evaluate,
    prepare,
    schedule_cost,
    solve,
    sustained_rate,
)

__all__ = ["BoundModel", "BoundStage", "Frontier", "FrontierPoint", "Problem", "configurations", "frontier",
           "model_from_sim", "prepare", "reactive_floor", "regret", "schedule_cost", "sustained_rate",
           "window_open_mask"]


@dataclass(frozen=True)
class FrontierPoint:
    core_hours: float
    seconds_above: float
    changes: int  # stage reconfigurations on the optimal schedule
    price: float  # the violation price (core-seconds per second above R_max) it minimizes at
    schedule: tuple[tuple[int, ...], ...] = field(default=(), repr=False, compare=False)  # per interval


@dataclass(frozen=True)
class Frontier:
    points: tuple[FrontierPoint, ...]  # supported points, core-hours ascending, seconds above descending
    duration_s: int

    def min_core_hours(self, seconds_above: float) -> float | None:
        """The fewest core-hours that keep the seconds above R_max within the budget (the convex
        envelope); None below the fewest seconds above R_max any schedule reaches."""
        pts = self.points
        if seconds_above >= pts[0].seconds_above:
            return pts[0].core_hours
        if seconds_above < pts[-1].seconds_above - 1e-9:
            return None
        for a, b in itertools.pairwise(pts):
            if b.seconds_above <= seconds_above <= a.seconds_above:
                return _lerp(seconds_above, a.seconds_above, b.seconds_above, a.core_hours, b.core_hours)
        return pts[-1].core_hours

    def min_seconds_above(self, core_hours: float) -> float | None:
        """The fewest seconds above R_max within a budget of core-hours; None below the fewest
        core-hours any schedule holds."""
        pts = self.points
        if core_hours >= pts[-1].core_hours:
            return pts[-1].seconds_above
        if core_hours < pts[0].core_hours - 1e-9:
            return None
        for a, b in itertools.pairwise(pts):
            if a.core_hours <= core_hours <= b.core_hours:
                return _lerp(core_hours, a.core_hours, b.core_hours, a.seconds_above, b.seconds_above)
        return pts[0].seconds_above

    @classmethod
    def from_rows(cls, rows: Sequence[dict[str, Any]], duration_s: int) -> Frontier:
        """The frontier `rows()` wrote (schedules are not kept)."""
        return cls(tuple(FrontierPoint(float(r["core_hours"]), float(r["seconds_above_rmax"]), int(r["changes"]),
                                       float(r["price"])) for r in rows), duration_s)

    def rows(self) -> list[dict[str, Any]]:
        return [{"core_hours": round(p.core_hours, 4), "seconds_above_rmax": round(p.seconds_above, 1),
                 "changes": p.changes, "price": round(p.price, 6)} for p in self.points]


def _lerp(x: float, x0: float, x1: float, y0: float, y1: float) -> float:
    return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def frontier(rates: Sequence[float], model: BoundModel, window_open: Sequence[bool] | None = None) -> Frontier:
    """The (core-hours, seconds above R_max) frontier of a trace: its supported points' envelope."""
    pb = prepare(rates, model, window_open)
    return Frontier(envelope(supported(pb, model)), duration_s=len(np.asarray(rates)))


def reactive_floor(rates: Sequence[float], model: BoundModel,
                   window_open: Sequence[bool] | None = None) -> Frontier:
    """The limit for a policy that reads metrics (issue 46), beside the clairvoyant frontier, the
    physical limit: the supported schedules of the load seen two control intervals late, each priced
    on the load as it was. A clairvoyant stages a change one interval ahead of the load it sees, so
    this planner's earliest reply to a change of load comes at the first control cycle after the
    change began, as the ideal reactive controller's: never sooner. Unlike the clairvoyant
    frontier, a run can beat it on one axis by luck."""
    r = np.asarray(rates, dtype=float)
    lag = min(2 * model.window_s, len(r))
    seen = np.concatenate([np.full(lag, r[0]), r[:len(r) - lag]])
    late, actual = prepare(seen.tolist(), model, window_open), prepare(rates, model, window_open)
    index = {tuple(int(c) for c in v): i for i, v in enumerate(actual.V)}
    points = []
    for p in supported(late, model):
        core, viol, changes, _ = evaluate(actual, [index[v] for v in p.schedule])
        points.append(FrontierPoint(core / 3600.0, viol, changes, p.price, p.schedule))
    return Frontier(envelope(points), duration_s=len(r))


def supported(pb: Problem, model: BoundModel) -> list[FrontierPoint]:
    """Every supported point, by dichotomic search: the two ends (fewest cores; fewest seconds
    above), then, between two neighbours, the price of the line through them, kept when its optimum
    lies below that line. Complete: it ends only when no segment hides a point below it (issue 46:
    a 60-point cap left a straight segment from 18 to 38 core-hours)."""
    sols: dict[tuple[float, float], FrontierPoint] = {}

    def point(wc: float, wv: float) -> tuple[float, float]:
        c, v, ch, path = solve(pb, model, wc, wv)
        key = (round(c, 6), round(v, 6))  # the same schedule's figures, whatever the float noise
        if key not in sols:
            sols[key] = FrontierPoint(c / 3600.0, v, ch, wv / wc if wc > 0 else INF,
                                      tuple(tuple(int(x) for x in pb.V[i]) for i in path))
        return sols[key].core_hours * 3600.0, sols[key].seconds_above

    cheap = point(1.0, 1e-9)  # fewest core-seconds, then fewest seconds above
    safe = point(1e-9, 1.0)  # fewest seconds above, then fewest core-seconds
    todo = [(cheap, safe)] if cheap != safe else []
    while todo:
        a, b = todo.pop()
        wc, wv = a[1] - b[1], b[0] - a[0]  # the normal of the line through a and b
        if wc <= 0 or wv <= 0:
            continue
        m = point(wc, wv)
        at_a = wc * a[0] + wv * a[1]
        if wc * m[0] + wv * m[1] < at_a - 1e-9 * abs(at_a):
            todo += [(a, m), (m, b)]
    return list(sols.values())


def envelope(points: Sequence[FrontierPoint]) -> tuple[FrontierPoint, ...]:
    """The lower convex envelope of (core-hours, seconds above): core-hours ascending."""
    hull: list[FrontierPoint] = []
    for p in sorted(points, key=lambda p: (p.core_hours, p.seconds_above)):
        if hull and p.seconds_above >= hull[-1].seconds_above:
            continue  # more cores and no fewer seconds above: dominated
        while len(hull) >= 2 and _cross(hull[-2], hull[-1], p) <= 0:
            hull.pop()
        hull.append(p)
    return tuple(hull)


def _cross(o: FrontierPoint, a: FrontierPoint, b: FrontierPoint) -> float:
    return ((a.core_hours - o.core_hours) * (b.seconds_above - o.seconds_above)
            - (a.seconds_above - o.seconds_above) * (b.core_hours - o.core_hours))


# ------------------------------------------------------------------------------- from the sim
def model_from_sim(cfg: Any, app_opts: Any, downtimes: dict[str, dict[str, float]] | None = None) -> BoundModel:
    """The bound's model of a `SimConfig` and `AppOptions`: the stages, R_max, the latency model,
    the noise, the bucket and the mechanisms' mean downtimes (lognormal: median · e^(σ²/2);
    `downtimes`: stage → {"scale_out": s, "scale_in": s} overrides them, e.g. with costs a run
    learned)."""
    stages, load = [], 1.0
    mean = math.exp(cfg.downtime_sigma ** 2 / 2)
    live = cfg.pool_kind == "standalone"  # every change live: no outage (a relaxation past the state partitions)
    for s in cfg.stages:
        if live:
            out_s, overlap = 0.0, 0.0
        elif cfg.mechanism == "active_backup":
            out_s, overlap = cfg.active_backup_median_s * mean, cfg.overlap_median_s * mean
        else:
            out_s, overlap = cfg.prestaged_median_s * mean, 0.0
        in_s = 0.0 if live else cfg.pause_resume_median_s * mean + s.state_bytes / 1e6 * cfg.state_s_per_mb
        o = (downtimes or {}).get(s.name, {})
        stages.append(BoundStage(s.name, s.rate_per_core, s.base_latency_ms, s.cores, s.min_cores, s.max_cores,
                                 float(o.get("scale_out", out_s)), float(o.get("scale_in", in_s)), overlap, load))
        load *= s.selectivity
    return BoundModel(tuple(stages), cfg.r_max_ms, cfg.queue_ms, cfg.rho_cap,
                      window_s=int(round(app_opts.control_interval_s)),
                      tokens=int(math.floor(app_opts.capacity)) if app_opts.policy == "token_bucket" else len(stages),
                      window_max_actions=len(stages) if live else cfg.window_max_actions, arrival_sd=cfg.arrival_noise,
                      capacity_sd=cfg.capacity_noise)


def window_open_mask(cfg: Any, duration_s: int, window_s: int) -> list[bool]:
    """Per control interval: is the app's maintenance window open at its start (SimConfig's cron);
    always, on a standalone pool, where a scale-in is live and needs no window."""
    from streamops.plan.application import AppView, maintenance_window

    app = AppView(cfg.app, cfg.r_max_ms, cfg.window_cron, cfg.window_minutes, cfg.window_max_actions)
    n = int(math.ceil(duration_s / window_s))
    if cfg.pool_kind == "standalone":
        return [True] * n
    start: datetime = cfg.start
    return [maintenance_window(app, start + timedelta(seconds=w * window_s)).open for w in range(n)]


def regret(front: Frontier, core_hours: float, seconds_above: float) -> dict[str, Any]:
    """A configuration's distance to the frontier on both axes, each as the share of what it spent
    that a clairvoyant would have saved (0: on the frontier; negative: better than the bound):
    - core regret = extra core-hours at equal seconds above R_max, over its core-hours;
    - violation regret = extra seconds above R_max at equal core-hours, over its seconds above.
    None where the bound has no point to compare with (fewer core-hours, or fewer seconds above,
    than any schedule reaches)."""
    c_star = front.min_core_hours(seconds_above)
    v_star = front.min_seconds_above(core_hours)
    return {
        "bound_core_hours": None if c_star is None else round(c_star, 4),
        "extra_core_hours": None if c_star is None else round(core_hours - c_star, 4),
        "core_regret": None if c_star is None else round(1.0 - c_star / core_hours, 4) if core_hours > 0 else 0.0,
        "bound_seconds_above": None if v_star is None else round(v_star, 1),
        "extra_seconds_above": None if v_star is None else round(seconds_above - v_star, 1),
        "violation_regret": None if v_star is None else round(1.0 - v_star / seconds_above, 4)
        if seconds_above > 0 else 0.0,
    }
