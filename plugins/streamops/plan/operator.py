"""The Operator Manager: one per stage. Reads its window, applies its policy, *requests*.

Pure: (stats, options, state, context) → (requests, new state). It never acts.
Gain (documented in docs/policies.md): for a scale-out, the predicted drop in SLO risk plus
0.1 × the relative core increase, where risk(u, latency) = max(0, u − target_utilization) +
max(0, latency / R_max − 1) and u is demand over capacity. A migration gains (U_r − U_max) +
0.05 and a scale-in 0.1 × the share of cores freed. The Application Manager ranks by
gain/cost within each class: scale-outs compete for tokens, disruptive actions for the
maintenance window's budget.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streamops.analyze.fuzzy import bottleneck_score
from streamops.analyze.stats import StageStats, busy_fraction, ds2_target, load_ratio, true_rate_per_core
from streamops.plan.budget import BASE_PRICE, Budget
from streamops.plan.kinds import MechanismName
from streamops.plan.model import MIGRATE, PRESTAGE, RELEASE, SCALE_IN, SCALE_OUT, OperatorState, Request
from streamops.plan.mpc import demand_path, plan_cores, spread_path
from streamops.plan.options import OperatorOptions

CostFn = Callable[[str, str, float, "str | None"], float]  # (stage_id, action, state_bytes, mechanism) → ms


@dataclass(frozen=True)
class PoolRoom:
    free_cores: int
    delay_ms: float  # network delay from the stage's current pool


@dataclass(frozen=True)
class OperatorContext:
    r_max_ms: float
    cost: CostFn
    pools: dict[str, PoolRoom] = field(default_factory=dict)  # other pools, for migration targets
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    app_stages: int = 1  # stages of the app: they share its R_max (mpc splits the price of a second above it)
    budget: Budget | None = None  # the app's error budget now (plan/budget.py): mpc's price follows it


def _risk(u: float, latency_ms: float | None, r_max_ms: float, target: float) -> float:
    lat = 0.0 if latency_ms is None else max(0.0, latency_ms / r_max_ms - 1.0)
    return max(0.0, u - target) + lat


def _snapshot(s: StageStats, **extra: Any) -> dict[str, Any]:
    return {"cores": s.cores, "S": round(busy_fraction(s), 4), "busy_source": s.busy_source,
            "input_rate": round(s.input_rate, 2), "backlog_rows": s.backlog_rows,
            "backlog_growth_rps": round(s.backlog_growth_rps, 2), "latency_p95_ms": s.latency_p95_ms,
            "host_cpu": s.host_cpu, "state_bytes": s.state_bytes, "window_s": round(s.span_s, 1),
            **({} if s.forecast_rate is None else {"forecast_rate": round(s.forecast_rate, 2)}), **extra}


def _demand(s: StageStats, opt: OperatorOptions) -> float | None:
    """The input rate to size for: with `forecast` and a forecast, max(measured, forecast peak over
    the horizon); else None, the measured rate (today's behaviour). S stays measured."""
    if opt.forecast and s.forecast_rate is not None:
        return max(s.input_rate, s.forecast_rate)
    return None


def _backlog_note(s: StageStats, opt: OperatorOptions) -> str:
    """What a backlog (a topic's lag) adds to the demand, for a reason a reader can check."""
    if s.backlog_rows <= 0:
        return ""
    extra = s.backlog_rows / opt.catch_up_s
    return f"; backlog {s.backlog_rows:,.0f} rows to catch up in {opt.catch_up_s:.0f}s: +{extra:,.0f}/s"


def _forecast_holds(s: StageStats, opt: OperatorOptions, cores: int) -> bool:
    """A scale-in to `cores` would be undone within the horizon: the forecast demand needs more
    than `cores` at `target_utilization`."""
    demand = _demand(s, opt)
    if demand is None or true_rate_per_core(s) is None:
        return False
    return ds2_target(s, opt.catch_up_s, opt.target_utilization, demand) > cores


def _busy_ahead(s: StageStats, opt: OperatorOptions) -> float:
    """EDF's S at the forecast demand: the measured S × demand / measured input rate, ≤ 1."""
    S, demand = busy_fraction(s), _demand(s, opt)
    if demand is None or s.input_rate <= 0:
        return S
    return min(1.0, S * demand / s.input_rate)


def _request(s: StageStats, action: str, target: int | None, gain: float, ctx: OperatorContext, reason: str,
             pool: str | None = None, mechanism: str | None = None, **snap: Any) -> Request:
    cost = 0.0 if action in (PRESTAGE, RELEASE) else ctx.cost(s.stage_id, action, s.state_bytes, mechanism)
    return Request(s.stage_id, action, target, pool, round(gain, 4), round(cost, 1), reason, _snapshot(s, **snap),
                   app=s.app)


def _scale_out(s: StageStats, target: int, opt: OperatorOptions, ctx: OperatorContext, reason: str,
               mechanism: str | None = None, **snap: Any) -> Request:
    u = load_ratio(s, opt.catch_up_s, _demand(s, opt))
    before = _risk(u, s.latency_p95_ms, ctx.r_max_ms, opt.target_utilization)
    after = _risk(u * s.cores / target, None, ctx.r_max_ms, opt.target_utilization)
    gain = max(0.01, before - after + (target - s.cores) / s.cores * 0.1)
    return _request(s, SCALE_OUT, target, gain, ctx, reason, mechanism=mechanism, **snap)


def _scale_in(s: StageStats, target: int, ctx: OperatorContext, reason: str, **snap: Any) -> Request:
    return _request(s, SCALE_IN, target, 0.1 * (s.cores - target) / s.cores, ctx, reason, **snap)


def _give_back(s: StageStats, opt: OperatorOptions) -> int:
    """The cores a scale-in goes to: n − 1, or DS2's n* at the scale-in margin (`scale_in_to`)."""
    if opt.scale_in_to == "ds2":
        n_star = ds2_target(s, opt.catch_up_s, opt.ds2_scale_in_margin, _demand(s, opt))  # forecast-aware
        return min(s.cores - 1, max(s.min_cores, n_star))
    return s.cores - 1


def pick_migration_target(pools: dict[str, PoolRoom], cores: int, rng: random.Random) -> str | None:
    """EDF: rank pools by network delay, pick at random with closer pools more likely, skip full ones."""
    ranked = sorted((p for p, r in pools.items() if r.free_cores >= cores), key=lambda p: pools[p].delay_ms)
    if not ranked:
        return None
    weights = [1.0 / (i + 1) for i in range(len(ranked))]
    return rng.choices(ranked, weights=weights)[0]


def edf(s: StageStats, opt: OperatorOptions, state: OperatorState,
        ctx: OperatorContext) -> tuple[list[Request], OperatorState]:
    """EDF thresholds [000]: migrate when U_r > U_max; scale out when S > S_out; scale in when
    sum(S)/(n−1) < c·S_out (sum over the n replicas, each busy S). A stage that is itself
    saturated scales out first: moving it would keep its n cores, and a migration waits for the
    maintenance window. With `forecast`, S is taken at the forecast demand (`_busy_ahead`)."""
    S, n = _busy_ahead(s, opt), s.cores
    if s.host_cpu is not None and s.host_cpu > opt.u_max and not (opt.s_out < S and n < s.core_cap):
        target = pick_migration_target(ctx.pools, n, ctx.rng)
        if target:
            gain = s.host_cpu - opt.u_max + 0.05
            return [_request(s, MIGRATE, n, gain, ctx, f"U_r {s.host_cpu:.2f} > U_max {opt.u_max}", pool=target)], state
    if opt.s_out < S and n < s.core_cap:
        return [_scale_out(s, n + 1, opt, ctx, f"S {S:.2f} > S_out {opt.s_out}")], state
    if n > s.min_cores and n * S / (n - 1) < opt.c * opt.s_out:
        return [_scale_in(s, _give_back(s, opt), ctx,
                          f"sum(S)/(n-1) {n * S / (n - 1):.2f} < c*S_out {opt.c * opt.s_out:.3f}")], state
    return [], state


def threshold3(s: StageStats, opt: OperatorOptions, state: OperatorState,
               ctx: OperatorContext) -> tuple[list[Request], OperatorState]:
    """Bottleneck score with three thresholds [001]: pre-stage at the alarming level, scale out
    above δ2 (sized by DS2, at least +1), scale in below δ1, release pre-staged with hysteresis."""
    S, n = busy_fraction(s), s.cores
    demand = _demand(s, opt)  # with `forecast`: u and the DS2 size at the forecast peak
    u = load_ratio(s, opt.catch_up_s, demand)
    score = bottleneck_score(S, s.host_mem or 0.0, u)
    snap: dict[str, Any] = {"score": round(score, 1), "load_ratio": round(u, 3)}
    out: list[Request] = []
    if state.prestaged and score < opt.alarming_threshold - opt.release_hysteresis:
        out.append(_request(s, RELEASE, None, 0.0, ctx,
                            f"O {score:.0f} < {opt.alarming_threshold - opt.release_hysteresis:.0f}", **snap))
        state = OperatorState(prestaged=False)
    target = max(n + 1, ds2_target(s, opt.catch_up_s, opt.target_utilization, demand))
    if score > opt.scale_out_threshold and n < s.core_cap:
        # `prestaged` stays set: the grant may be declined, and the release below (or a later
        # scale-out) still owns the staged copy.
        out.append(_scale_out(s, min(target, s.core_cap), opt, ctx, f"O {score:.0f} > {opt.scale_out_threshold:.0f}",
                              mechanism="prestaged" if state.prestaged else None, **snap))
    elif score > opt.alarming_threshold and n < s.core_cap and not state.prestaged:
        out.append(_request(s, PRESTAGE, min(target, s.core_cap), 0.0, ctx,
                            f"O {score:.0f} > alarming {opt.alarming_threshold:.0f}", **snap))
        state = OperatorState(prestaged=True)
    elif score < opt.scale_in_threshold and n > s.min_cores and not _forecast_holds(s, opt, n - 1):
        out.append(_scale_in(s, _give_back(s, opt), ctx, f"O {score:.0f} < {opt.scale_in_threshold:.0f}", **snap))
    elif (opt.scale_in_to == "ds2" and n > s.min_cores and score < opt.alarming_threshold - opt.release_hysteresis
          and ds2_target(s, opt.catch_up_s, opt.ds2_scale_in_margin, demand) < n):
        m = _give_back(s, opt)
        out.append(_scale_in(s, m, ctx, f"DS2 n* {m} < n {n} at {opt.ds2_scale_in_margin:.0%} (O {score:.0f})", **snap))
    return out, state


def ds2(s: StageStats, opt: OperatorOptions, state: OperatorState,
        ctx: OperatorContext) -> tuple[list[Request], OperatorState]:
    """Rate-based target sized in one step. Scale-in uses a lower utilization target than
    scale-out (a hysteresis band), so a constant load cannot make it flap."""
    n = s.cores
    demand = _demand(s, opt)  # with `forecast`: sized, both ways, for the forecast peak
    u = load_ratio(s, opt.catch_up_s, demand)
    up = ds2_target(s, opt.catch_up_s, opt.target_utilization, demand)
    down = ds2_target(s, opt.catch_up_s, opt.ds2_scale_in_margin, demand)
    snap: dict[str, Any] = {"load_ratio": round(u, 3), "n_star": up}
    if up > n:
        return [_scale_out(s, up, opt, ctx, f"DS2 n* {up} > n {n} (load {u:.2f}{_backlog_note(s, opt)})",
                           **snap)], state
    if down < n:
        why = f"DS2 n* {down} < n {n} at {opt.ds2_scale_in_margin:.0%} target"
        return [_scale_in(s, down, ctx, why, **snap)], state
    return [], state


def _slo_price(opt: OperatorOptions, ctx: OperatorContext) -> tuple[float, str]:
    """The app's price of a second above R_max, and what set it: the options' fixed `slo_price`,
    else the error budget's (plan/budget.py), else the budget's base price (no budget known yet)."""
    if opt.slo_price is not None:
        return opt.slo_price, "slo_price, fixed"
    if ctx.budget is not None:
        return ctx.budget.price, ctx.budget.text()
    return BASE_PRICE, "no error budget measured yet: the base price"


def _change_cost(s: StageStats, state: OperatorState, ctx: OperatorContext) -> Callable[[int, int], float]:
    """Seconds a switch to n cores at plan step j is expected to cost, from the learned costs.
    They depend on the action only, so they are looked up once per cycle, not per (n, step)."""
    out_s, in_s = (ctx.cost(s.stage_id, a, s.state_bytes, None) / 1000.0 for a in (SCALE_OUT, SCALE_IN))
    # A scale-out a step away (or with a copy staged already) may restart from the copy: the
    # Application Manager grants the pre-stage now, and the mechanism rule picks it if cheaper.
    staged_s = min(out_s, ctx.cost(s.stage_id, SCALE_OUT, s.state_bytes, MechanismName.PRESTAGED) / 1000.0)

    def change_s(n: int, j: int) -> float:
        if n < s.cores:
            return in_s
        return staged_s if j > 1 or state.prestaged else out_s
    return change_s


def mpc(s: StageStats, opt: OperatorOptions, state: OperatorState,
        ctx: OperatorContext) -> tuple[list[Request], OperatorState]:
    """Receding horizon priced in core-seconds (plan/mpc.py): the core count whose plan over the
    next `mpc_horizon_s` costs least in cores held + price × expected seconds above R_max +
    price × the change's learned cost, asked for only when the cheapest switch is due now. The price
    follows the app's error budget (`_slo_price`)."""
    mu = true_rate_per_core(s)
    if mu is None:
        return [], state
    steps = max(1, int(round(opt.mpc_horizon_s / opt.mpc_step_s)))
    # A forecast doing worse than holding the measured rate is set aside, and the reason says so.
    unskilled = opt.forecast and s.forecast_skill is not None and s.forecast_skill > opt.forecast_max_skill
    use = opt.forecast and not unskilled
    demand = demand_path(s.arrival_rate, s.forecast_path if use else (), opt.forecast_bucket_s, steps, opt.mpc_step_s)
    sd = spread_path(demand, s.forecast_sd if use else None, opt.forecast_bucket_s, opt.mpc_step_s, opt.mpc_rate_sd)

    change_s = _change_cost(s, state, ctx)
    app_price, priced_by = _slo_price(opt, ctx)
    # A second above R_max is the app's, and the chain's stages overload together when the load rises:
    # priced in full by each of them, it would be paid once per stage.
    price = app_price / max(1, ctx.app_stages)
    p = plan_cores(s.cores, s.min_cores, s.core_cap, mu, demand, sd, opt.mpc_step_s, opt.mpc_max_utilization,
                   price, change_s, s.backlog_rows)
    snap: dict[str, Any] = {"mpc_target": p.target, "mpc_switch_step": p.switch_step,
                            "expected_above_s": round(p.expected_above_s, 1), "saving_core_s": round(p.saving, 1),
                            "demand_now": round(demand[0], 2), "demand_peak": round(max(demand), 2),
                            "slo_price": round(app_price, 2),
                            **({"forecast_season_s": s.forecast_season_s} if use else {})}
    plan_text = (f"{p.target} cores {'now' if p.switch_step == 1 else f'in {p.switch_step - 1} steps'} save "
                 f"{p.saving:.0f} core-s over {opt.mpc_horizon_s:.0f} s at {price:.3g} core-s per s above R_max, its "
                 f"share of {app_price:.3g} ({priced_by}; peak demand {max(demand):.0f} rows/s)")
    if unskilled:
        plan_text += (f"; forecast set aside: its recent error is {s.forecast_skill:.2f}× the naive forecast's "
                      f"(> {opt.forecast_max_skill:g})")
        snap["forecast_skill"] = round(float(s.forecast_skill or 0.0), 3)
    out: list[Request] = []
    # A scale-out planned for later is staged now (no restart, no token), so that it restarts
    # pre-staged when it is due; a plan that no longer wants more cores gives the copy back.
    if p.target > s.cores and p.switch_step > 1 and not state.prestaged:
        out.append(_request(s, PRESTAGE, p.target, 0.0, ctx, f"MPC plans {plan_text}", **snap))
        state = OperatorState(prestaged=True)
    elif state.prestaged and p.target <= s.cores:
        out.append(_request(s, RELEASE, None, 0.0, ctx, f"MPC no longer plans a scale-out ({p.target} cores)", **snap))
        state = OperatorState(prestaged=False)
    if p.target == s.cores or p.switch_step != 1:  # nothing to change, or a change not due yet
        return out, state
    gain = round(p.saving / 3600.0, 4)  # core-hours saved: the Application Manager ranks by gain/cost
    if p.target > s.cores:
        mech = "prestaged" if state.prestaged else None
        return out + [_request(s, SCALE_OUT, p.target, max(0.01, gain), ctx, f"MPC: {plan_text}", mechanism=mech,
                               **snap)], state
    return out + [_request(s, SCALE_IN, p.target, max(0.001, gain), ctx, f"MPC: {plan_text}", **snap)], state


POLICIES = {"edf": edf, "threshold3": threshold3, "ds2": ds2, "mpc": mpc}


def operator_cycle(policy: str, s: StageStats, opt: OperatorOptions, state: OperatorState,
                   ctx: OperatorContext) -> tuple[list[Request], OperatorState]:
    """Run one Operator Manager decision. Nothing is requested on a half-filled window."""
    if s.span_s < opt.min_window_fill * opt.window_s or s.batches == 0:
        return [], state
    return POLICIES[policy](s, opt, state, ctx)
