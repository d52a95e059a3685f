"""The receding-horizon controller (plan/mpc.py, the `mpc` Operator Manager): pure."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from streamops.analyze.stats import StageStats
from streamops.plan.application import AppView, application_cycle
from streamops.plan.cost import CostModel, Observation
from streamops.plan.model import SCALE_IN, SCALE_OUT, AppState, OperatorState
from streamops.plan.mpc import demand_path, plan_cores, spread_path
from streamops.plan.operator import OperatorContext, operator_cycle
from streamops.plan.options import AppOptions, OperatorOptions

STEP = 60.0


def plan(demand, cores=2, price=20.0, change=10.0, sd=None, backlog=0.0, max_cores=12):
    sd = sd if sd is not None else [0.05 * d for d in demand]
    return plan_cores(cores, 1, max_cores, 100.0, demand, sd, STEP, 0.85, price, lambda n, j: change, backlog)


def test_a_load_the_cores_serve_keeps_them():
    p = plan([120.0] * 10)  # 2 cores × 100 × 0.85 = 170 rows/s: comfortable
    assert p.target == 2 and p.saving == 0


def test_a_step_up_is_met_in_one_decision_with_enough_cores():
    p = plan([300.0] * 10)
    assert p.switch_step == 1 and p.target * 100 * 0.85 >= 300 * 1.05  # sized once, with room for the spread
    # convergence: planning again at the new size asks for no more cores (the extra one that drained
    # step 0's queue may go back, in a maintenance window)
    assert plan([300.0] * 10, cores=p.target).target <= p.target


def test_a_rise_forecast_later_waits_for_it():
    later = plan([120.0] * 6 + [400.0] * 4)
    assert later.target > 2 and later.switch_step > 1  # cheapest to switch later: not now
    soon = plan([120.0] + [400.0] * 9)
    assert soon.target > 2 and soon.switch_step == 1  # a change asked now runs from the next step on
    assert plan([120.0, 120.0] + [400.0] * 8).switch_step == 2  # … so a rise two steps ahead waits a cycle


def test_the_price_trades_cores_for_seconds_above():
    demand = [200.0 + 60 * math.sin(h) for h in range(10)]
    sizes = [plan(demand, price=p, sd=[40.0] * 10).target for p in (0.5, 5.0, 50.0, 500.0)]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
    assert plan([300.0] * 10, price=0.0).target == 1  # seconds above cost nothing: the fewest cores


def test_a_costly_change_is_not_worth_a_small_gain():
    demand = [175.0] * 10  # a hair above 2 cores' comfortable load
    assert plan(demand, change=1.0).target == 3
    assert plan(demand, change=10_000.0).target == 2  # the learned cost of a restart outweighs it


def test_the_backlog_is_a_queue_that_needs_cores_to_drain():
    # 160 rows/s on 2 cores (200 rows/s): comfortable without a backlog; with 60 000 rows queued the
    # 40 rows/s to spare would take 25 min to drain it, above R_max all along
    assert plan([160.0] * 10, sd=[0.0] * 10).target == 2
    p = plan([160.0] * 10, sd=[0.0] * 10, backlog=60_000.0)
    assert p.target > 2 and p.switch_step == 1


def test_scale_in_when_the_load_falls_for_the_horizon():
    p = plan([40.0] * 10, cores=6)
    assert p.target < 6 and p.switch_step == 1 and p.target * 100 * 0.85 >= 40


def test_demand_and_spread_paths():
    path = demand_path(100.0, (110.0, 120.0, 130.0), 60.0, 5, 60.0)
    assert path == [100.0, 120.0, 130.0, 130.0, 130.0]  # now measured; then the forecast; last held
    assert demand_path(100.0, (), 60.0, 3, 60.0) == [100.0] * 3
    sd = spread_path([100.0] * 4, 8.0, 60.0, 60.0, 0.05)
    assert sd == pytest.approx([8.0, 8.0, 8.0 * math.sqrt(2), 8.0 * math.sqrt(3)])
    assert spread_path([100.0] * 2, None, 60.0, 60.0, 0.1) == [10.0, 10.0]


def _stats(rate: float, cores: int, *, backlog: float = 0.0, forecast: tuple[float, ...] = (),
           growth: float = 0.0) -> StageStats:
    span = 120.0
    rows = rate * span
    return StageStats("taxi.count", "taxi", "local", cores, 1, 12, 8, span, 60, int(rows),
                      busy_ms=rows / (100.0 * cores) * 1000.0, backlog_rows=backlog, backlog_growth_rps=growth,
                      latency_p95_ms=90.0, state_bytes=200e6, forecast_path=forecast, forecast_sd=5.0,
                      forecast_rate=max(forecast) if forecast else None)


def test_the_operator_asks_and_the_application_manager_grants_through_the_bucket():
    opt = OperatorOptions(forecast=True, slo_price=20.0)
    c = OperatorContext(200.0, CostModel(), {}, random.Random(0))
    reqs, state = operator_cycle("mpc", _stats(180.0, 2, forecast=(180.0,) + (400.0,) * 10), opt, OperatorState(), c)
    assert [r.action for r in reqs] == [SCALE_OUT] and reqs[0].target_cores >= 5
    assert "MPC" in reqs[0].reason and reqs[0].snapshot["mpc_target"] == reqs[0].target_cores
    assert reqs[0].cost_ms == CostModel()("taxi.count", SCALE_OUT, 200e6)  # the learned cost, priced
    app = AppView("taxi", 200.0, "0 3 * * *", 30, 3)
    now = datetime(2026, 1, 1, 12, tzinfo=UTC)
    granted, _ = application_cycle(app, AppOptions(), AppState(tokens=1.0), reqs, 120.0, False, now)
    assert [d.outcome for d in granted] == ["granted"]
    empty, _ = application_cycle(app, AppOptions(), AppState(tokens=0.0), reqs, 120.0, False, now)
    assert [d.outcome for d in empty] == ["declined"]  # no token, no proactive scale-out
    # the forecast off: the same stage sized for what it measures
    measured = OperatorOptions(slo_price=20.0)
    quiet, _ = operator_cycle("mpc", _stats(100.0, 2), measured, OperatorState(), c)
    assert quiet == []
    low, _ = operator_cycle("mpc", _stats(30.0, 6), measured, OperatorState(), c)
    assert [r.action for r in low] == [SCALE_IN]
    # at the default price (320 core-s per s) a restart is dear: the idle cores are kept for now
    assert operator_cycle("mpc", _stats(30.0, 6), OperatorOptions(), OperatorState(), c)[0] == []


def test_a_stage_falling_behind_is_sized_for_its_arrivals_not_its_throughput():
    """At capacity, a stage processes what its cores serve, whatever arrives: 200 rows/s on 2
    cores while its backlog grows 300 rows/s is a load of 500 rows/s, which 5 cores of 100 rows/s
    serve only flat out (mpc plans at most 85 % busy); sized on the 200 it processed, it asked for 5."""
    opt = OperatorOptions(slo_price=320.0)
    c = OperatorContext(200.0, CostModel(), {}, random.Random(0))
    behind = _stats(200.0, 2, backlog=300.0 * 5, growth=300.0)  # 5 s behind: it has just begun
    assert behind.arrival_rate == 500.0
    reqs, _ = operator_cycle("mpc", behind, opt, OperatorState(), c)
    assert [r.action for r in reqs] == [SCALE_OUT] and reqs[0].target_cores >= 6
    assert reqs[0].snapshot["demand_now"] == 500.0
    # a backlog draining is arrivals below the throughput
    assert _stats(200.0, 2, backlog=1000.0, growth=-50.0).arrival_rate == 150.0


@pytest.mark.parametrize("bad", [{"slo_price": -1}, {"mpc_max_utilization": 0}, {"mpc_step_s": 0},
                                 {"mpc_horizon_s": 30.0}, {"mpc_rate_sd": -0.1}])
def test_bad_mpc_options_are_refused(bad):
    with pytest.raises(ValueError):
        OperatorOptions.from_params(bad)


def test_a_queue_no_plan_drains_within_the_horizon_still_wants_the_most_cores():
    # 1 000 rows/s and 200 000 queued: even 12 cores (1 200 rows/s) need 1 000 s to drain it, more
    # than the horizon; every plan is above R_max all along, and the queue left decides
    p = plan([1000.0] * 10, cores=6, backlog=200_000.0)
    assert p.target == 12 and p.switch_step == 1


def test_a_scale_out_planned_for_later_is_staged_now_and_released_when_the_plan_drops_it():
    opt = OperatorOptions(forecast=True, slo_price=20.0)
    c = OperatorContext(200.0, CostModel(), {}, random.Random(0))
    rise_later = _stats(120.0, 2, forecast=(120.0,) * 4 + (400.0,) * 8)
    reqs, state = operator_cycle("mpc", rise_later, opt, OperatorState(), c)
    assert [r.action for r in reqs] == ["prestage"] and state.prestaged
    assert reqs[0].snapshot["mpc_switch_step"] > 1
    due, state = operator_cycle("mpc", _stats(120.0, 2, forecast=(120.0,) + (400.0,) * 10), opt, state, c)
    assert [r.action for r in due] == [SCALE_OUT] and state.prestaged  # the copy is the grant's to use
    gone, state = operator_cycle("mpc", _stats(120.0, 2, forecast=(120.0,) * 11), opt, state, c)
    assert [r.action for r in gone] == ["release_prestage"] and not state.prestaged


def test_a_switch_a_staged_copy_makes_cheaper_waits_one_step_for_it():
    """160 rows/s on 2 cores is within reach but above mpc's 85 %: a third core is worth it. A
    restart now costs 30 s; one a step later, from a copy staged meanwhile, 5 s. A stage whose
    queue grows (170 rows/s and above) cannot wait."""
    def plan_at(rate, later):
        return plan_cores(2, 1, 12, 100.0, [rate] * 10, [0.05 * rate] * 10, STEP, 0.85, 20.0,
                          lambda n, j: 30.0 if j == 1 else later)
    assert (plan_at(160.0, 30.0).target, plan_at(160.0, 30.0).switch_step) == (3, 1)
    assert (plan_at(160.0, 5.0).target, plan_at(160.0, 5.0).switch_step) == (3, 2)
    assert plan_at(175.0, 5.0).switch_step == 1


def test_the_operator_stages_a_copy_first_when_its_restart_is_cheaper():
    """The stage's own pause-resumes cost 30 s; a staged restart is estimated at its share (plan.cost).
    The first cycle stages a copy; the next asks for the scale-out from it."""
    cost = CostModel([Observation("taxi.count", SCALE_OUT, 200e6, 15_000, "pause_resume", 15_000)])
    c = OperatorContext(200.0, cost, {}, random.Random(0))
    opt = OperatorOptions(slo_price=40.0)
    reqs, state = operator_cycle("mpc", _stats(150.0, 2), opt, OperatorState(), c)
    assert [r.action for r in reqs] == ["prestage"] and state.prestaged
    reqs, state = operator_cycle("mpc", _stats(150.0, 2), opt, state, c)
    assert [r.action for r in reqs] == [SCALE_OUT] and reqs[0].snapshot["mpc_target"] == 3
    assert reqs[0].cost_ms == pytest.approx(30_000 * 10 / 16)  # priced as the staged restart it will be


def test_a_surge_counts_as_soon_as_the_recent_rows_show_it():
    """The window's mean lags a surge by up to its length: 100 rows/s over 2 minutes, 400 over the
    last 20 s is a stage that must serve 400 now. A fall counts only once the window shows it."""
    opt = OperatorOptions(slo_price=320.0)
    c = OperatorContext(200.0, CostModel(), {}, random.Random(0))
    assert operator_cycle("mpc", _stats(100.0, 2), opt, OperatorState(), c)[0] == []
    surge = replace(_stats(100.0, 2), recent_arrival_rate=400.0)
    assert surge.arrival_rate == 400.0
    reqs, _ = operator_cycle("mpc", surge, opt, OperatorState(), c)
    assert [r.action for r in reqs] == [SCALE_OUT] and reqs[0].target_cores * 100 * 0.85 >= 400
    assert replace(_stats(100.0, 2), recent_arrival_rate=20.0).arrival_rate == 100.0


def test_a_stage_fed_by_another_is_sized_for_what_that_one_receives():
    """A chain: the stage before receives 500 rows/s but passes on only what its cores serve (200).
    Sized on its own arrivals, the stage after would scale out once now and again when its
    upstream has; sized on what reaches its upstream, once (DS2's propagation)."""
    fed = replace(_stats(200.0, 2), upstream_arrival_rate=500.0)
    assert fed.arrival_rate == 500.0
    c = OperatorContext(200.0, CostModel(), {}, random.Random(0))
    reqs, _ = operator_cycle("mpc", fed, OperatorOptions(slo_price=320.0), OperatorState(), c)
    assert [r.action for r in reqs] == [SCALE_OUT] and reqs[0].target_cores * 100 * 0.85 >= 500
