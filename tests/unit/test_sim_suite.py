"""The trace suite (streamops.sim.suite) and bench/suite.py's selection rule (issue 15).

Pure: no database, no Spark. Building a trace takes milliseconds; one short simulation runs.
"""

from __future__ import annotations

import csv
import importlib.util
import itertools
import math
import statistics
from pathlib import Path

import numpy as np
import pytest

from streamops.paths import REPO_ROOT
from streamops.sim import load_trace, run_simulation
from streamops.sim.suite import (
    DAY_S,
    FAMILIES,
    HELD_OUT,
    REAL_EXPORT_CSV,
    TEST_SEEDS,
    TRAIN_FAMILIES,
    TRAIN_SEEDS,
    MissingTraceFile,
    real_export,
    suite_trace,
)
from streamops.sim.traces import change_points

SYNTHETIC = [f for f in FAMILIES if f != "real_export"]


@pytest.fixture(scope="module", autouse=True)
def test_env():
    """Overrides conftest's session fixture of the same name: the simulator needs no database."""
    yield {}


@pytest.fixture(scope="module")
def small_export(tmp_path_factory) -> Path:
    """A stage_metrics export in the real file's format: 20 min of 4-s batches, a 600-s wave."""
    p = tmp_path_factory.mktemp("export") / "run.csv"
    with p.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["ts", "stage_id", "deployment_id", "batch_id", "input_rows", "input_rps", "cores"])
        for i in range(300):
            rps = 200 + 100 * math.sin(2 * math.pi * i * 4 / 600)
            w.writerow([f"2026-11-24T01:{i * 4 // 60:02d}:{i * 4 % 60:02d}.000Z", "app.stage", 1, i,
                        int(rps * 4), round(rps, 1), 1])
    return p


def _rates(tr) -> np.ndarray:
    return np.array([tr.rows(t) for t in range(int(tr.default_duration_s))])


def _family(family: str, seed: int, small_export: Path):
    return real_export(seed, small_export) if family == "real_export" else suite_trace(family, seed)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_builds_for_train_and_test_seeds(family, small_export):
    for seed in TRAIN_SEEDS + TEST_SEEDS:
        tr = _family(family, seed, small_export)
        r = _rates(tr)
        assert len(r) >= DAY_S and np.all(np.isfinite(r)) and np.all(r >= 0)
        assert r.max() > 0
        assert tr.meta["day_s"] == DAY_S and tr.meta["family"] == family and tr.meta["seed"] == seed
        assert tr.rows(5) == pytest.approx(tr.rate_fn.r[5]) and tr.rate(5.5) == pytest.approx(tr.rate_fn.r[5])


@pytest.mark.parametrize("family", list(FAMILIES))
def test_train_and_test_seeds_give_different_traces_and_a_seed_the_same(family, small_export):
    train = [_rates(_family(family, s, small_export)) for s in TRAIN_SEEDS]
    test = [_rates(_family(family, s, small_export)) for s in TEST_SEEDS]
    for a in train:
        for b in test:
            assert len(a) != len(b) or not np.allclose(a, b)
    assert not np.allclose(train[0], train[1])
    assert np.array_equal(_rates(_family(family, 2, small_export)), train[1])


def test_split_constants():
    assert TRAIN_SEEDS == (1, 2, 3) and TEST_SEEDS == (101, 102, 103)
    assert not set(TRAIN_SEEDS) & set(TEST_SEEDS)
    assert "issue15_day" in HELD_OUT and "issue15_day" not in TRAIN_FAMILIES
    assert {"diurnal_noise", "flash_crowd", "outage", "step_drift", "weekly_growth", "pareto_bursts",
            "real_export"} == set(TRAIN_FAMILIES)


def test_smooth_noise_makes_no_false_steps():
    for seed in (1, 101):
        tr = suite_trace("diurnal_noise", seed)
        assert change_points(tr, int(tr.default_duration_s)) == []
        r = _rates(tr)
        smooth = r / np.convolve(np.pad(r, 150, mode="edge"), np.ones(301) / 301, mode="valid")
        assert 0.04 < np.std(smooth) < 0.15  # about 10 % noise around the 5-minute mean
        ten_min = r[: len(r) // 600 * 600].reshape(-1, 600).mean(axis=1)
        assert ten_min.max() > 3 * ten_min.min()  # a diurnal swing


def test_outage_is_zero_for_a_minute_or_more_then_bursts():
    for seed in TRAIN_SEEDS + TEST_SEEDS:
        tr = suite_trace("outage", seed)
        r = tr.rate_fn.r
        assert tr.meta["events"]
        for ev in tr.meta["events"]:
            s, e, c = ev["start"], ev["end"], ev["catchup_end"]
            assert 60 <= e - s <= 300 and np.all(r[s:e] == 0)
            assert r[e:c].mean() > 1.2 * r[s - 60:s].mean()  # the backlog on top of the normal rate
            assert ev["missed_rows"] > 0


def test_flash_crowd_peaks_at_twice_its_base_or_more():
    for seed in TRAIN_SEEDS + TEST_SEEDS:
        tr = suite_trace("flash_crowd", seed)
        r = tr.rate_fn.r
        assert len(tr.meta["events"]) == 4
        for ev in tr.meta["events"]:
            s, e = ev["start"], ev["end"]
            assert 300 <= e - s <= 900 and 2.0 <= ev["multiplier"] <= 5.0
            assert r[s:e].max() >= 2.0 * r[s - 60:s].mean()
        assert len(change_points(tr, len(r))) >= 8  # each crowd starts and ends as a step


def test_step_drift_holds_levels_15_to_40_minutes():
    for seed in TRAIN_SEEDS + TEST_SEEDS:
        tr = suite_trace("step_drift", seed)
        levels = tr.meta["levels"]
        starts = [lv["start"] for lv in levels] + [len(tr.rate_fn)]
        assert all(900 <= b - a <= 2400 for a, b in zip(starts[:-2], starts[1:-1], strict=True))
        assert all(40 / 2 <= lv["level"] <= 320 for lv in levels)
        ups = [b["level"] > a["level"] for a, b in itertools.pairwise(levels)]
        assert any(ups) and not all(ups)
        assert len(change_points(tr, len(tr.rate_fn))) >= len(levels) - 2


def test_weekly_growth_grows_day_over_day():
    for seed in TRAIN_SEEDS + TEST_SEEDS:
        tr = suite_trace("weekly_growth", seed)
        r, g = tr.rate_fn.r, tr.meta["growth_per_day"]
        days = len(r) // DAY_S
        assert 2 <= days <= 4 and 0.05 <= g <= 0.15
        first, last = r[:DAY_S].mean(), r[(days - 1) * DAY_S:days * DAY_S].mean()
        assert last / first == pytest.approx((1 + g) ** (days - 1), rel=0.06)


def test_pareto_bursts_are_heavy_tailed():
    heights = []
    for seed in TRAIN_SEEDS + TEST_SEEDS:
        tr = suite_trace("pareto_bursts", seed)
        heights += [ev["height"] for ev in tr.meta["events"]]
    assert len(heights) >= 30 and min(heights) >= 0.5
    assert max(heights) >= 4 * statistics.median(heights)  # a heavy tail, not a handful of equal bursts
    top = sorted(heights)[-len(heights) // 10:]
    assert sum(top) > 0.3 * sum(heights)  # the top 10 % of bursts carry much of the extra load


def test_issue15_day_has_its_flash_crowd_and_outage():
    for seed in (1, 101):
        tr = suite_trace("issue15_day", seed)
        r = tr.rate_fn.r
        assert len(r) == DAY_S
        crowd, out = tr.meta["events"]
        assert crowd["end"] - crowd["start"] == 600 and crowd["multiplier"] == 3.0
        assert r[crowd["start"]:crowd["end"]].mean() > 2.2 * r[crowd["start"] - 60:crowd["start"]].mean()
        assert out["end"] - out["start"] == 120 and np.all(r[out["start"]:out["end"]] == 0)
        assert np.percentile(r[r > 0], 1) > 30 and np.percentile(r, 95) < 3 * 260 * 1.4


def test_real_export_tiles_the_run_and_seeds_differ(small_export):
    a, b = real_export(1, small_export), real_export(101, small_export)
    assert a.meta["stretch"] != b.meta["stretch"] and 80 <= a.meta["level"] <= 160
    ra = a.rate_fn.r
    assert len(ra) == 2 * DAY_S and ra.max() > 1.5 * ra.min()  # the run's wave survives
    assert np.abs(np.diff(ra)).max() < 0.05 * ra.mean()  # the mirrored tiling has no joins


def test_real_export_without_its_file_names_it(tmp_path):
    missing = tmp_path / "nope.csv"
    with pytest.raises(MissingTraceFile, match="nope.csv"):
        real_export(1, missing)


@pytest.mark.skipif(not REAL_EXPORT_CSV.exists(), reason=f"{REAL_EXPORT_CSV} not there")
def test_real_export_from_the_committed_run():
    tr = suite_trace("real_export", 1)
    assert tr.default_duration_s == 2 * DAY_S and tr.rate_fn.r.min() > 0


def test_load_trace_accepts_suite_specs():
    tr = load_trace("suite:flash_crowd:101")
    assert tr.name == "suite:flash_crowd:101"
    assert np.array_equal(tr.rate_fn.r, suite_trace("flash_crowd", 101).rate_fn.r)
    assert load_trace("suite:outage").meta["seed"] == 1
    with pytest.raises(ValueError, match="unknown trace family 'nope'.*flash_crowd"):
        load_trace("suite:nope:1")
    with pytest.raises(ValueError, match="seed must be an integer"):
        load_trace("suite:outage:x")


def test_a_suite_trace_runs_in_the_simulator():
    s = run_simulation("edf_b075", "suite:issue15_day:101", seed=101, plot=False)
    assert s["trace"] == "suite:issue15_day:101" and s["duration_s"] == DAY_S
    assert s["convergence_decisions"]  # the crowd and the outage are steps
    assert s["rows_in"] == pytest.approx(suite_trace("issue15_day", 101).rate_fn.r.sum(), rel=1e-6)


# ------------------------------------------------------------------ bench/suite.py: the choice
def _bench():
    spec = importlib.util.spec_from_file_location("bench_suite", REPO_ROOT / "bench" / "suite.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(policy, family, seed, above, down=50.0, ch=10.0, avail=0.999, reconf=10, conv=1, flips=0):
    return {"policy": policy, "family": family, "seed": seed, "availability": avail, "downtime_s": down,
            "seconds_above_rmax": above, "violated_windows": above, "reconfigs_per_day": reconf / 2,
            "reconfigurations_total": reconf, "core_hours": ch, "convergence_decisions": [conv],
            "convergence_decisions_max": conv, "flip_flops": flips, "changes_per_stage_day": reconf / 6}


def test_the_suite_reports_flip_flops_and_changes_per_stage_per_day():
    bench = _bench()
    runs = [_run("edf_b075", "f1", 1, 400, flips=2), _run("edf_b075", "f1", 2, 400, flips=1),
            _run("x", "f1", 1, 100, reconf=12), {k: v for k, v in _run("x", "f1", 2, 100, reconf=12).items()
                                                 if k not in bench.CHURN}]  # an old run: no churn figures
    agg = bench.aggregate(runs)
    assert agg[("f1", "edf_b075")]["flip_flops"] == 1.5 and agg[("f1", "x")]["changes_per_stage_day"] == 1.0
    rows = {r[0]: dict(zip(bench.COLS, r, strict=True)) for r in bench.family_rows(agg, "f1", ["edf_b075", "x"])}
    assert rows["edf_b075"]["flip-flops"] == "1.5" and rows["x"]["changes/stage/day"] == "1.00"
    s = run_simulation("threshold3", "suite:issue15_day:1", seed=1, plot=False)
    assert s["flip_flops"] >= 0 and s["changes_per_stage_day"] == pytest.approx(
        s["reconfigurations_total"] / len(s["final_cores"]) / (s["duration_s"] / DAY_S), abs=1e-3)


def _fabricated(test_factor: float) -> list[dict]:
    runs = []
    for seed, factor in [(s, 1.0) for s in TRAIN_SEEDS] + [(s, test_factor) for s in TEST_SEEDS]:
        for fam in ("f1", "f2"):
            runs.append(_run("edf_b075", fam, seed, 400))
            runs.append(_run("meets_goals", fam, seed, 150, ch=9.5))  # all goals on both families
            runs.append(_run("low_loss", fam, seed, 10, down=10, ch=10.5 if fam == "f1" else 9, avail=0.99))
            runs.append(_run("other", fam, seed, 300 * factor, down=40 * factor, ch=10 * factor))
    return runs


def test_the_choice_is_a_pure_function_of_training_runs():
    bench = _bench()
    train = [r for r in _fabricated(1.0) if r["seed"] in TRAIN_SEEDS]
    base = bench.select(train)
    assert base["choice"] == "meets_goals"  # most families meeting the goals beats a lower loss
    assert base["scores"]["families_met"] == 2
    # then the most goals met: low_loss has the lowest loss but misses A twice and C once
    assert bench.select(train, ["edf_b075", "low_loss", "other"])["choice"] == "other"
    assert bench.select(train, ["edf_b075", "low_loss", "other"])["scores"]["goals_met"] == 8
    # test runs, however good, change nothing: they are dropped before scoring
    for factor in (0.0, 0.01, 100.0):
        mixed = bench.select(_fabricated(factor))
        assert mixed["choice"] == base["choice"] and mixed["scores"] == base["scores"]
        assert mixed["ranking"] == base["ranking"]


def test_candidates_are_plain_data_and_include_the_named_configs():
    bench = _bench()
    from streamops.sim import POLICY_CONFIGS

    assert set(POLICY_CONFIGS) <= set(bench.CANDIDATES)
    assert all(len(row) == 4 and isinstance(row[2], dict) and isinstance(row[3], dict) for row in bench.GRID)
    a = {"availability": 0.996, "seconds_above_rmax": 10, "core_hours": 5, "convergence_max": None,
         "reconfigs_per_day": 12, "downtime_s": 1}
    b = {**a, "seconds_above_rmax": 20, "core_hours": 5}
    assert all(bench.goals_met(a, b).values())
    assert bench.goals_met({**a, "convergence_max": 3}, b)["V"] is False


# ------------------------------------------------------------------ bench/suite.py: regret (issue 29)
def _bounds_rows(families=("f1", "f2"), seeds=(*TRAIN_SEEDS, *TEST_SEEDS)):
    """The same made-up frontier for every trace: 10 core-hours at 100 s … 20 at 10 s."""
    pts = [{"core_hours": 10.0, "seconds_above_rmax": 100.0, "changes": 2, "price": 0.0},
           {"core_hours": 20.0, "seconds_above_rmax": 10.0, "changes": 4, "price": 1.0}]
    return [{"family": f, "seed": s, "duration_s": 7200, "points": pts} for f in families for s in seeds]


def test_regret_choice_reads_training_runs_only_and_prices_both_axes():
    bench = _bench()
    from streamops.sim import PolicyConfig

    runs = []
    for seed in (*TRAIN_SEEDS, *TEST_SEEDS):
        test = seed in TEST_SEEDS
        for fam in ("f1", "f2"):
            runs.append(_run("on_frontier", fam, seed, 55, ch=15.0))  # on the line: no regret
            runs.append(_run("wasteful", fam, seed, 10, ch=40.0))  # half its cores wasted
            runs.append(_run("late", fam, seed, 5 if test else 100, ch=15.0))  # great on test only
            runs.append(_run("a_down", fam, seed, 10, ch=20.0, avail=0.95))  # on the frontier, but down 5 %
            for price in (1, 1000):  # mpc at two prices: each judged at its own
                runs.append(_run(f"mpc_p{price}", fam, seed, 10 if price > 1 else 55, ch=20.0 if price > 1 else 16.0,
                                 avail=0.999 if price > 1 else 0.99))
    scored = bench.with_regret(runs, _bounds_rows(), prices=(1.0, 1000.0))
    frontier_run = next(r for r in scored if r["policy"] == "on_frontier")
    assert frontier_run["core_regret"] == pytest.approx(0) and frontier_run["violation_regret"] == pytest.approx(0)
    wasteful = next(r for r in scored if r["policy"] == "wasteful")
    assert wasteful["core_regret"] == pytest.approx(0.5)  # 20 core-hours reach 10 s: half of 40 was spare
    late = next(r for r in scored if r["policy"] == "late" and r["seed"] == TRAIN_SEEDS[0])
    assert late["violation_regret"] == pytest.approx(0.45)  # 15 core-hours reach 55 s, it had 100
    # at 1000 core-s per s the frontier's least cost is 20 core-hours and 10 s: 82 000
    assert bench.priced_regret(wasteful, 1000.0) == pytest.approx(1 - 82_000 / (40 * 3600 + 10_000))

    candidates = {n: PolicyConfig(n, "mpc", {"slo_price": 1000.0 if n == "mpc_p1000" else 1.0})
                  if n.startswith("mpc") else PolicyConfig(n) for n in {r["policy"] for r in runs}}
    price, best = bench.choose(scored, candidates)
    # the lowest price that keeps availability: mpc_p1's runs are down 1 % (goal A is 99.5 %)
    assert price["choice"] == "mpc_p1000" and price["price"] == 1000.0
    # a_down ties it at 0 and comes first by name, but is below the availability floor
    assert best["choice"] == "mpc_p1000" and best["scores"]["priced_regret"] == pytest.approx(0)
    assert best["ranking"][0]["name"] == "a_down"
    # a test seed cannot move the pick: the same choice from the training runs alone
    again = bench.choose([r for r in scored if r["seed"] in TRAIN_SEEDS], candidates)
    assert again[1]["choice"] == best["choice"] and again[0]["choice"] == price["choice"]
    test_scores = {s["name"]: s for s in bench.regret_scores([r for r in scored if r["seed"] in TEST_SEEDS])}
    assert test_scores["late"]["per_family"]["f1"]["beyond_bound"] == len(TEST_SEEDS)
    priced = {s["name"]: s for s in bench.priced_scores(scored, lambda n: 1000.0)}
    assert bench.ahead_of_all(priced, "on_frontier", ["late"]) == []  # late beats it on test


def test_the_budget_check_says_where_mpc_meets_the_slo_and_whether_it_is_the_cheapest_that_does():
    """Issue 46's done-when, computed from the test runs: slo_target met, fewest core-hours among
    the configurations that meet it, flip-flops, changes per stage per day on diurnal families."""
    bench = _bench()
    T = 7200

    def run(policy, fam, above, ch, flips=0, reconf=6):
        return {**_run(policy, fam, 101, above, ch=ch, flips=flips, reconf=reconf), "sla_compliance": 1 - above / T}

    runs = [run("mpc", "flash_crowd", 50, 10.0), run("ds2", "flash_crowd", 20, 12.0),  # both meet 99 %: mpc cheaper
            run("edf", "flash_crowd", 200, 8.0),  # cheaper, but 97.2 % within R_max
            run("mpc", "outage", 100, 9.0, flips=1, reconf=24), run("ds2", "outage", 30, 8.0)]
    rows, summary = bench.budget_check(bench.aggregate(runs), ["flash_crowd", "outage"], ["mpc", "ds2", "edf"],
                                       floor={}, clairvoyant={})
    by = {r[0]: dict(zip(bench.BUDGET_COLS, r, strict=True)) for r in rows}
    assert by["flash_crowd"]["meets slo_target"] == "yes" and by["flash_crowd"]["fewest core-hours meeting it"] \
        == "mpc (10.00)"
    assert by["outage"]["meets slo_target"] == "no" and by["outage"]["fewest core-hours meeting it"] == "ds2 (8.00)"
    assert "on 1/2 families" in summary[0] and "cheapest" not in summary[0] and "it on 1 " in summary[0]
    assert "1.0 (done when 0)" in summary[1] and "4.00 (≤ 3)" in summary[1]  # outage is a diurnal family


def test_runs_are_scored_against_the_reactive_floor_beside_the_frontier():
    bench = _bench()
    floor_pts = [{"core_hours": 12.0, "seconds_above_rmax": 120.0, "changes": 2, "price": 0.0},
                 {"core_hours": 24.0, "seconds_above_rmax": 20.0, "changes": 4, "price": 1.0}]
    bounds = [{**b, "floor_points": floor_pts} for b in _bounds_rows(("f1",), (101,))]
    scored = bench.with_regret([_run("p", "f1", 101, 120, ch=24.0)], bounds)
    (r,) = scored
    assert r["core_regret"] == pytest.approx(1 - 10.0 / 24.0, abs=0.05)  # the frontier: ~10 core-hours at 100 s
    assert r["floor_core_regret"] == pytest.approx(0.5)  # the floor: 12 core-hours at 120 s
    floors = {s["name"]: s for s in bench.regret_scores(scored, prefix="floor_")}
    assert floors["p"]["core_regret"] == pytest.approx(0.5) and floors["p"]["complete"]
