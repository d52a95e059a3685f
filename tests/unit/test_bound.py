"""The clairvoyant bound (sim/bound.py) against brute force: on traces small enough to try every
schedule, the programme's optimum is the best schedule at every price, every schedule lies on or
above the frontier, and the frontier's points are schedules that exist."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from streamops.sim.bound import (
    BoundModel,
    BoundStage,
    frontier,
    model_from_sim,
    prepare,
    reactive_floor,
    regret,
    schedule_cost,
    sustained_rate,
    window_open_mask,
)
from streamops.sim.bound_dp import solve
from streamops.sim.model import SimConfig
from streamops.sim.policies import POLICY_CONFIGS


def _model(tokens: int = 1, **kw) -> BoundModel:
    stages = (BoundStage("a", rate_per_core=10.0, base_latency_ms=20.0, cores=1, min_cores=1, max_cores=3,
                         scale_out_s=2.0, scale_in_s=3.0),
              BoundStage("b", rate_per_core=15.0, base_latency_ms=30.0, cores=1, min_cores=1, max_cores=3,
                         scale_out_s=1.0, scale_in_s=2.0, overlap_s=1.0))
    return BoundModel(stages, r_max_ms=100.0, queue_ms=5.0, window_s=5, tokens=tokens, per_total=None, **kw)


RATES = [4, 6, 5, 18, 25, 22, 30, 9, 8, 7, 3, 3, 4, 2, 5, 20, 21, 24, 26, 19, 6, 5, 4, 3, 2]  # 5 intervals of 5 s
OPEN = [False, False, True, False, True]


def _every_schedule(model: BoundModel) -> list[tuple[float, float]]:
    """(core-hours, seconds above) of every feasible schedule; infeasible ones are refused by schedule_cost."""
    confs = list(itertools.product(*[range(s.min_cores, s.max_cores + 1) for s in model.stages]))
    init = tuple(s.cores for s in model.stages)
    pb = prepare(RATES, model, OPEN)
    out = []
    for rest in itertools.product(confs, repeat=len(OPEN) - 1):
        try:
            out.append(schedule_cost(pb, model, (init, *rest)))
        except ValueError:
            continue
    return out


@pytest.mark.parametrize("tokens, noise", [(1, 0.0), (2, 0.0), (1, 0.1)])
def test_the_programme_finds_the_best_schedule_at_every_price(tokens, noise):
    model = replace(_model(tokens), arrival_sd=noise, capacity_sd=noise / 2)
    brute = _every_schedule(model)
    front = frontier(RATES, model, OPEN)
    assert len(brute) < 9 ** 4, "the bucket and the windows must forbid some schedules"
    for price in (0.0, 0.01, 0.3, 1.0, 3.0, 30.0, 1000.0):  # core-seconds per second above R_max
        best = min(c * 3600 + price * v for c, v in brute)
        got = min(p.core_hours * 3600 + price * p.seconds_above for p in front.points)
        assert got == pytest.approx(best, rel=1e-9, abs=1e-6), price


def test_every_schedule_lies_on_or_above_the_frontier():
    model = _model(1)
    front = frontier(RATES, model, OPEN)
    for c, v in _every_schedule(model):
        bound = front.min_core_hours(v)
        assert bound is not None and bound <= c + 1e-9
        assert front.min_seconds_above(c) <= v + 1e-9
    # the ends: the fewest seconds above any schedule reaches, the fewest core-hours any holds
    assert front.points[-1].seconds_above == pytest.approx(min(v for _, v in _every_schedule(model)))
    assert front.points[0].core_hours == pytest.approx(min(c for c, _ in _every_schedule(model)))


def test_frontier_points_are_real_schedules_and_convex():
    model = _model(2)
    front, pb = frontier(RATES, model, OPEN), prepare(RATES, model, OPEN)
    for p in front.points:
        assert schedule_cost(pb, model, p.schedule) == pytest.approx((p.core_hours, p.seconds_above))
    c = [p.core_hours for p in front.points]
    v = [p.seconds_above for p in front.points]
    assert c == sorted(c) and v == sorted(v, reverse=True)
    slopes = [(v[i + 1] - v[i]) / (c[i + 1] - c[i]) for i in range(len(c) - 1)]
    assert slopes == sorted(slopes), "the lower convex envelope: slopes rise"


def test_schedules_that_break_the_bucket_or_the_windows_are_refused():
    model = _model(1)
    pb = prepare(RATES, model, OPEN)
    with pytest.raises(ValueError, match="tokens"):  # two scale-outs at once with one token
        schedule_cost(pb, model, [(1, 1), (2, 2), (2, 2), (2, 2), (2, 2)])
    with pytest.raises(ValueError, match="window"):  # a scale-in while no window is open
        schedule_cost(pb, model, [(1, 1), (2, 1), (2, 1), (1, 1), (1, 1)])
    schedule_cost(pb, model, [(1, 1), (2, 1), (1, 1), (1, 1), (1, 1)])  # interval 2 is open


def test_sustained_rate_matches_the_closed_form_and_grows_with_cores():
    one = BoundModel((BoundStage("s", 100.0, 50.0, 1, 1, 4, 1.0, 1.0),), r_max_ms=200.0, queue_ms=7.0,
                     rho_cap=0.999)
    # base + q·ρ/(1−ρ) = R_max  ⇒  ρ = x / (q + x), x = R_max − base
    x = 150.0
    lam = sustained_rate(np.array([[1], [2], [4]]), one)
    assert lam == pytest.approx([100 * x / (7 + x), 200 * x / (7 + x), 400 * x / (7 + x)], rel=1e-6)
    # the rho cap: a stage at 0.95 costs 7 × 19 = 133 ms at most, so R_max is reached only at capacity
    capped = BoundModel(one.stages, r_max_ms=200.0, queue_ms=7.0, rho_cap=0.95)
    assert sustained_rate(np.array([[2]]), capped)[0] == pytest.approx(200.0, rel=1e-6)


def test_noise_makes_seconds_near_the_limit_uncertain():
    quiet, noisy = _model(1), replace(_model(1), arrival_sd=0.1, capacity_sd=0.05)
    lam = sustained_rate(np.array([[1, 1]]), quiet)[0]
    rates = np.array([0.5 * lam, lam * 0.999, 1.5 * lam])
    q, p = prepare(rates, quiet, None), prepare(rates, noisy, None)
    i = [tuple(v) for v in q.V].index((1, 1))
    assert q.above[0][i] == 1  # only the second above λ*
    assert 1.4 < p.above[0][i] < 1.6  # ≈ 0 + ½ + 1: the second at λ* is a coin toss


def test_regret_reads_the_envelope_on_both_axes():
    model = _model(2)
    front = frontier(RATES, model, OPEN)
    p = front.points[len(front.points) // 2]
    on = regret(front, p.core_hours, p.seconds_above)
    assert on["extra_core_hours"] == pytest.approx(0, abs=1e-6) and on["extra_seconds_above"] == pytest.approx(0)
    worse = regret(front, p.core_hours * 1.25, p.seconds_above * 2)
    # a fifth of its core-hours, and half its seconds above, were more than a clairvoyant needed
    assert worse["core_regret"] > 0.2 and worse["violation_regret"] > 0.5
    assert regret(front, 0.0, 0.0)["bound_core_hours"] is None  # better than possible on both: no bound


def test_model_from_sim_reads_the_simulators_mechanisms_and_bucket():
    cfg = SimConfig()
    m = model_from_sim(cfg, POLICY_CONFIGS["recommended"].app_opts())
    assert m.tokens == 2 and m.window_s == 60 and m.r_max_ms == cfg.r_max_ms
    count = next(s for s in m.stages if s.name == "count")
    mean = np.exp(cfg.downtime_sigma ** 2 / 2)  # the lognormal's mean over its median
    assert count.scale_out_s == pytest.approx(cfg.prestaged_median_s * mean)
    assert count.scale_in_s == pytest.approx(cfg.pause_resume_median_s * mean + 200 * cfg.state_s_per_mb)
    assert (m.arrival_sd, m.capacity_sd) == (cfg.arrival_noise, cfg.capacity_noise)
    ab = model_from_sim(SimConfig(mechanism="active_backup"), POLICY_CONFIGS["edf_b075"].app_opts())
    assert ab.tokens == 1 and ab.stages[0].overlap_s == pytest.approx(SimConfig().overlap_median_s * mean)
    mask = window_open_mask(cfg, 3 * 3600, 60)
    # "45 1-23/2 * * *" for 30 min: open 23:45-00:15 and 01:45-02:15
    assert mask[14] and not mask[15] and not mask[104] and mask[105] and mask[134] and not mask[135]
    assert sum(mask) == 45


def _wide_trace() -> tuple[BoundModel, np.ndarray]:
    """One stage of 1-40 cores under a noisy wave: more than 60 supported points (issue 46's cap)."""
    stage = BoundStage("a", rate_per_core=10.0, base_latency_ms=20.0, cores=1, min_cores=1, max_cores=40,
                       scale_out_s=1.0, scale_in_s=2.0)
    model = BoundModel((stage,), r_max_ms=100.0, queue_ms=5.0, window_s=5, tokens=1, arrival_sd=0.05,
                       capacity_sd=0.05, backlog_memory_s=60)
    rng = np.random.default_rng(3)
    return model, np.clip(120 + 80 * np.sin(np.arange(600) / 40) + rng.normal(0, 30, 600), 2, None)


def test_the_search_is_complete_no_segment_hides_a_supported_point():
    model, rates = _wide_trace()
    front, pb = frontier(rates, model), prepare(rates, model, None)
    assert len(front.points) > 60
    for a, b in itertools.pairwise(front.points):
        wc, wv = a.seconds_above - b.seconds_above, (b.core_hours - a.core_hours) * 3600
        c, v, _, _ = solve(pb, model, wc, wv)
        line = wc * a.core_hours * 3600 + wv * a.seconds_above
        assert wc * c + wv * v >= line - 1e-9 * abs(line), (a, b)



# ------------------------------------------------------------------ issue 46: backlog carried between seconds
def _one_stage(window_s: int = 60, max_cores: int = 1) -> BoundModel:
    stage = BoundStage("s", rate_per_core=100.0, base_latency_ms=20.0, cores=1, min_cores=1, max_cores=max_cores,
                       scale_out_s=5.0, scale_in_s=10.0)
    return BoundModel((stage,), r_max_ms=200.0, queue_ms=7.0, window_s=window_s, per_total=None)


def test_backlog_carries_between_seconds_within_an_interval():
    model = _one_stage()
    # 10 s at twice the capacity leave 1 000 rows; at 50 rows/s of spare capacity they take 20 s to drain
    rates = [200.0] * 10 + [50.0] * 50
    pb = prepare(rates, model, None)
    assert 29 <= pb.above[0][0] <= 30  # the old model counted the 10 s of overload alone


def test_backlog_carries_between_intervals_while_a_configuration_is_held():
    model = _one_stage(window_s=10)
    rates = [200.0] * 10 + [50.0] * 30  # the overload's backlog drains in the next two intervals
    pb = prepare(rates, model, None)
    _, seconds = schedule_cost(pb, model, [(1,), (1,), (1,), (1,)])
    assert 29 <= seconds <= 30


def test_a_change_drains_the_backlog_it_inherits():
    model = _one_stage(window_s=20, max_cores=2)
    # interval 0 at 1 core: 10 s at twice its capacity, then 10 s at half: 500 rows are left over
    pb = prepare([200.0] * 10 + [50.0] * 10 + [100.0] * 20, model, None)
    # interval 1 at 2 cores: 5 s down at 100 rows/s, then the 500 + 500 rows drain at 100 rows/s spare
    assert schedule_cost(pb, model, [(1,), (2,)])[1] == pytest.approx(20 + 15)
    quiet = prepare([50.0] * 20 + [100.0] * 20, model, None)  # nothing carried: the downtime's own backlog
    assert schedule_cost(quiet, model, [(1,), (2,)])[1] == pytest.approx(10)


def test_the_bounds_schedules_replay_in_the_simulator_with_their_backlog():
    """Frontier schedules of a 40-minute overload, replayed as scripted changes (3 seeds): the cores
    are the model's, and the cheapest schedule, which holds its cores through the overload, is above
    R_max for as long as the model says (the old model, without backlog, said 1 743 s of 2 340)."""
    from streamops.sim.bound_replay import replay
    from streamops.sim.traces import SimTrace

    cfg = SimConfig()
    T = 2400
    trace = SimTrace("overload", lambda t: 120.0 + (180.0 if 600 <= t < 1500 else 0.0) + 30.0 * np.sin(t / 97), T)
    model = model_from_sim(cfg, POLICY_CONFIGS["accept_all"].app_opts())
    front = frontier([trace.rows(t) for t in range(T)], model)
    for p in front.points[::4]:
        runs = [replay(p.schedule, model, cfg, trace, T, seed=s) for s in (1, 2, 3)]
        assert sum(c for c, _ in runs) / 3 == pytest.approx(p.core_hours, rel=0.02)
    cheap = front.points[0]
    runs = [replay(cheap.schedule, model, cfg, trace, T, seed=s) for s in (1, 2, 3)]
    assert sum(v for _, v in runs) / 3 == pytest.approx(cheap.seconds_above, rel=0.05)


STEP = [4.0] * 10 + [25.0] * 20  # 6 intervals of 5 s: the load steps up at the third interval's start


def test_the_reactive_floor_replies_to_a_step_at_the_first_cycle_after_it_and_lies_above_the_clairvoyant():
    model = _model(2)
    clairvoyant, floor = frontier(STEP, model), reactive_floor(STEP, model)
    pb = prepare(STEP, model, None)
    # the clairvoyant's safest schedule is sized for the step when it comes; a reactive one only
    # at the next cycle
    assert clairvoyant.points[-1].schedule[2] != clairvoyant.points[0].schedule[2]
    assert floor.points[-1].schedule[3] != floor.points[-1].schedule[2]
    for p in floor.points:
        assert p.schedule[2] == p.schedule[1], f"a reactive schedule changed as the step began: {p.schedule}"
        # a real schedule priced on the load as it was, never better than the clairvoyant frontier
        assert schedule_cost(pb, model, p.schedule) == pytest.approx((p.core_hours, p.seconds_above))
        assert clairvoyant.min_seconds_above(p.core_hours) <= p.seconds_above + 1e-9
    assert floor.points[-1].seconds_above > clairvoyant.points[-1].seconds_above
    # a run between the two is behind the clairvoyant but ahead of every reactive schedule
    c = floor.points[-1].core_hours
    v = (clairvoyant.min_seconds_above(c) + floor.points[-1].seconds_above) / 2
    assert regret(clairvoyant, c, v)["violation_regret"] > 0 > regret(floor, c, v)["violation_regret"]
