"""A receding-horizon controller priced in core-seconds (issue 29): the `mpc` Operator Manager's plan.

Pure. Each cycle, for every core count n the stage may run and every step j of the horizon at
which it could switch to n, the expected cost over the next H steps of `step_s` seconds is

    Σ_h  cores_h · step_s  +  slo_price · E[seconds above R_max at step h]  +  slo_price · change_s(n, j)

where cores_h is today's count before step j and n from it, and change_s is the learned cost of
the change (its output gap plus catch-up, `plan.cost`), paid once if n differs. It depends on j:
a switch a step away can restart from a copy staged meanwhile, which costs less than one now. The backlog is a
queue carried from step to step (it grows by demand − cores · rate); a step is above R_max while
its queue lasts, and for the rest of it when the demand exceeds what the cores serve at
`max_utilization`; the queue left at the horizon's end counts the seconds it takes to drain. The
demand is the forecast with a normal spread, so that part is (step_s − queue time) ·
P(demand > cores · rate · max_utilization).

A change asked now takes effect from the next step at the earliest (the Application Manager grants
at its next cycle, then the stage restarts), so step 0 always runs today's cores and j ≥ 1. The
plan with the least cost wins; it is acted on only when its switch is due now (j = 1): a switch
that is cheapest later waits (its cores are pre-staged meanwhile, `plan.operator.mpc`), and the
next cycle plans again with fresher data.

`slo_price` is the one knob: how many core-seconds one second above R_max is worth.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class MpcPlan:
    target: int  # the cores of the cheapest plan
    switch_step: int  # the step from which it runs `target` (1 = ask now; 0 = no switch)
    cost: float  # its expected cost, core-seconds
    stay_cost: float  # the expected cost of keeping today's cores
    expected_above_s: float  # seconds above R_max the cheapest plan expects over the horizon

    @property
    def saving(self) -> float:
        return self.stay_cost - self.cost


def _p_above(demand: float, sd: float, capacity: float) -> float:
    """P(demand > capacity) for demand ~ N(demand, sd)."""
    if sd <= 0:
        return 1.0 if demand > capacity else 0.0
    return 0.5 * math.erfc((capacity - demand) / (sd * math.sqrt(2.0)))


def plan_cores(cores: int, min_cores: int, max_cores: int, rate_per_core: float, demand: Sequence[float],
               sd: Sequence[float], step_s: float, max_utilization: float, slo_price: float,
               change_s: Callable[[int, int], float], backlog_rows: float = 0.0) -> MpcPlan:
    """The cheapest plan over the horizon len(demand) (demand and sd per step, rows/s);
    change_s(n, j): seconds above R_max a change to n made at step j costs. The backlog carries
    from step to step: an under-sized plan pays for every step its queue lasts, not just one."""
    if not demand or len(sd) != len(demand):
        raise ValueError("demand and sd need one value per step of the horizon")
    H = len(demand)

    def run(j: int, n: int) -> tuple[float, float]:
        """(core-seconds, expected seconds above R_max) of: `cores` for steps < j, then n."""
        q, core_s, above = backlog_rows, 0.0, 0.0
        for h in range(H):
            c = (cores if h < j else n)
            cap = c * rate_per_core
            # seconds the queue lasts in this step (the response is above R_max while it does) …
            drain = step_s if demand[h] >= cap else min(step_s, q / (cap - demand[h]))
            # … and for the rest of it, the chance that the demand outgrows the cores' comfortable load
            above += drain + (step_s - drain) * _p_above(demand[h], sd[h], cap * max_utilization)
            q = max(0.0, q + (demand[h] - cap) * step_s)
            core_s += c * step_s
        # The queue left at the horizon's end is above R_max until it drains: without this, a
        # queue no plan drains within the horizon makes every plan equally bad, and the fewest
        # cores "win". Its spare capacity is floored at 5 %, so a plan that never drains costs
        # much, not infinitely much.
        cap = (cores if j >= H else n) * rate_per_core
        return core_s, above + q / max(cap - demand[-1], 0.05 * cap)

    stay_core, stay_above = run(H, cores)
    stay = stay_core + slo_price * stay_above
    best = MpcPlan(cores, 0, stay, stay, stay_above)
    for n in range(min_cores, max_cores + 1):
        if n == cores:
            continue
        for j in range(1, H):  # step 0 runs today's cores whatever is asked now
            core_s, above = run(j, n)
            c = core_s + slo_price * (above + change_s(n, j))
            if c < best.cost - 1e-9:
                best = MpcPlan(n, j, c, stay, above)
    return best


def demand_path(input_rate: float, forecast_path: Sequence[float],
                bucket_s: float, steps: int, step_s: float) -> list[float]:
    """The demand per step: now, the measured rate; then the forecast path (per bucket from the
    bucket in progress; the last bucket held), or the measured rate without a forecast. The
    backlog is not demand here: plan_cores carries it as a queue."""
    out = [input_rate]
    for h in range(1, steps):
        if forecast_path:
            i = min(len(forecast_path) - 1, int(h * step_s // bucket_s))
            out.append(max(0.0, float(forecast_path[i])))
        else:
            out.append(input_rate)
    return out


def spread_path(demand: Sequence[float], innovation_sd: float | None, bucket_s: float, step_s: float,
                relative_sd: float) -> list[float]:
    """The demand's standard deviation per step: the forecast's innovation × √(buckets ahead),
    or `relative_sd` of the demand without one; never below `relative_sd` of the demand."""
    out = []
    for h, d in enumerate(demand):
        floor = relative_sd * d
        if innovation_sd is None:
            out.append(floor)
        else:
            out.append(max(floor, innovation_sd * math.sqrt(max(1.0, h * step_s / bucket_s))))
    return out
