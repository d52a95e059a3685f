"""The trace-driven simulator (streamops.sim): regressions on the EDF scenario.

Pure Python: no database, no Spark. Each run is well under a second.
"""

from __future__ import annotations

import csv
import json
from datetime import timedelta

import pytest

from streamops.plan.application import AppView, maintenance_window
from streamops.sim import POLICY_CONFIGS, SUMMARY_KEYS, PolicyConfig, SimConfig, load_trace, run_simulation
from streamops.sim.traces import change_points

# Documented in docs/policies.md ("Convergence"): on a step 100 → 250 → 400 rows/s the
# recommended config needs at most this many granted reconfigurations per step until the
# response stays ≤ R_max for 120 s; EDF's setup (edf_b075) at most EDF_STEP_DECISIONS.
RECOMMENDED_STEP_DECISIONS = 3
EDF_STEP_DECISIONS = 5
STEP_TRACE = "step:rates=100/250/400,step_s=1200"


@pytest.fixture(scope="module", autouse=True)
def test_env():
    """Overrides conftest's session fixture of the same name: the simulator needs no database."""
    yield {}


def _strip(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k not in ("summary_json", "response_png")}


def test_accept_all_has_more_downtime_than_edf_token_bucket():
    """EDF [000]: the decentralized baseline reconfigures more and loses more availability
    than the token bucket with beta = 0.75."""
    accept = run_simulation("accept_all", "diurnal", seed=1, plot=False)
    bucket = run_simulation("edf_b075", "diurnal", seed=1, plot=False)
    assert accept["downtime_s"] > bucket["downtime_s"]
    assert accept["availability"] < bucket["availability"]
    assert accept["reconfigurations_total"] > bucket["reconfigurations_total"]
    # the bucket defers scale-ins to the maintenance window; accept-all does not
    assert accept["reconfigurations"]["scale_in"] > bucket["reconfigurations"]["scale_in"]


def test_token_bucket_scales_in_only_inside_the_maintenance_window():
    # the default 1 h scale-down delay outlasts this compressed day's night: 10 min lets it give back
    s = run_simulation("edf_b075", "diurnal", seed=2, plot=False, scale_down_delay_s=600)
    cfg = SimConfig()
    app = AppView(cfg.app, cfg.r_max_ms, cfg.window_cron, cfg.window_minutes, cfg.window_max_actions)
    scale_ins = [r for r in s["reconfiguration_log"] if r["action"] == "scale_in"]
    assert scale_ins, "the diurnal night should bring scale-ins"
    for r in scale_ins:
        assert maintenance_window(app, cfg.start + timedelta(seconds=r["t_s"])).open, r


@pytest.mark.parametrize("policy,bound", [("threshold3_tuned", RECOMMENDED_STEP_DECISIONS),
                                          ("edf_b075", EDF_STEP_DECISIONS)])
def test_step_change_converges_within_documented_decisions(policy, bound):
    s = run_simulation(policy, STEP_TRACE, seed=1, plot=False)
    conv = s["convergence"]
    assert [c["t_s"] for c in conv] == [1200, 2400]
    assert all(c["settled"] for c in conv), conv
    assert s["convergence_decisions_max"] <= bound, conv
    assert s["convergence_decisions"] == [c["decisions"] for c in conv]


def test_recommended_converges_in_fewer_decisions_than_edf():
    ours = run_simulation("recommended", STEP_TRACE, seed=1, plot=False)
    edf = run_simulation("edf_b075", STEP_TRACE, seed=1, plot=False)
    assert sum(ours["convergence_decisions"]) < sum(edf["convergence_decisions"])


def test_same_seed_same_summary_and_other_seed_differs():
    a = run_simulation("threshold3", "spikes", seed=7, duration_s=2400, plot=False)
    b = run_simulation("threshold3", "spikes", seed=7, duration_s=2400, plot=False)
    c = run_simulation("threshold3", "spikes", seed=8, duration_s=2400, plot=False)
    assert json.dumps(_strip(a), sort_keys=True, default=str) == json.dumps(_strip(b), sort_keys=True, default=str)
    assert a["response_mean_ms"] != c["response_mean_ms"]


def test_csv_trace_replay(tmp_path):
    path = tmp_path / "trace.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_s", "rate"])
        w.writerows([[0, 100], [600, 100], [601, 350], [1200, 350]])
    tr = load_trace(str(path))
    assert tr.rate(300) == pytest.approx(100)
    assert tr.rate(900) == pytest.approx(350)
    assert tr.rate(600.5) == pytest.approx(225)
    assert tr.default_duration_s == 1200
    assert change_points(tr, 1200) == [(600, 100.0, 350.0)]
    s = run_simulation("recommended", str(path), seed=1, arrival_noise=0.0, plot=False)
    assert s["duration_s"] == 1200
    assert s["rows_in"] == pytest.approx(100 * 600 + 225 + 350 * 599, rel=1e-6)
    assert len(s["convergence"]) == 1


def test_stage_metrics_export_replay(tmp_path):
    """A `stage_metrics` export: ts (ISO), stage_id, input_rows per batch → rows over the gap."""
    path = tmp_path / "stage_metrics.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["ts", "stage_id", "input_rows"])
        for i in range(10):
            w.writerow([f"2026-01-01T00:00:{2 * i:02d}Z", "parse", 400])  # 400 rows per 2 s batch
            w.writerow([f"2026-01-01T00:00:{2 * i:02d}Z", "top10", 40])
    tr = load_trace(str(path))
    assert tr.rate(5) == pytest.approx(200)
    assert tr.meta["stage_id"] == "parse"
    assert load_trace(f"{path}#top10").rate(5) == pytest.approx(20)
    rps = tmp_path / "rps.csv"
    rps.write_text("ts,input_rps\n0,50\n10,150\n")
    assert load_trace(str(rps)).rate(5) == pytest.approx(100)
    s = run_simulation("edf_b075", str(path), seed=1, plot=False)
    assert s["duration_s"] == 19


def test_summary_json_and_png(tmp_path):
    s = run_simulation("recommended", "ramp", seed=3, out_dir=tmp_path / "run", duration_s=1200)
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    for key in SUMMARY_KEYS:
        assert key in s and key in on_disk, key
    assert on_disk["policy"] == "recommended" and on_disk["trace"] == "ramp" and on_disk["seed"] == 3
    assert 0.0 <= on_disk["availability"] <= 1.0
    assert set(on_disk["reconfigurations"]) >= {"scale_out", "scale_in", "migrate"}
    png = tmp_path / "run" / "response.png"
    assert png.stat().st_size > 10_000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_named_configs_and_overrides():
    assert set(POLICY_CONFIGS) >= {"accept_all", "edf_b050", "edf_b075", "threshold3", "ds2", "recommended"}
    assert POLICY_CONFIGS["edf_b075"].app_opts().beta == 0.75
    s = run_simulation("edf_b075", "steps", seed=1, duration_s=600, beta=0.5, s_out=0.8, plot=False)
    assert s["policy_config"]["app_options"]["beta"] == 0.5
    assert s["policy_config"]["operator_options"]["s_out"] == 0.8
    custom = PolicyConfig("mine", "ds2", {"target_utilization": 0.8}, {"policy": "accept_all"})
    assert run_simulation(custom, "steps", seed=1, duration_s=600, plot=False)["policy"] == "mine"
    with pytest.raises(ValueError):
        run_simulation("edf_b075", "steps", duration_s=60, no_such_option=1)
    with pytest.raises(ValueError):
        PolicyConfig("bad", "nope")
    with pytest.raises(ValueError):
        run_simulation("edf_b075", "no-such-trace")


def test_active_backup_trades_downtime_for_cores():
    pr = run_simulation("edf_b075", "steps", seed=1, plot=False)
    ab = run_simulation("edf_b075", "steps", seed=1, mechanism="active_backup", plot=False)
    assert ab["mechanisms"].get("active_backup", 0) > 0
    assert ab["downtime_s"] < pr["downtime_s"]


# Issue 15: 80 rows/s with a 3× burst from 1 800 s to 2 400 s; the next window opens at 1:45 (6 300 s).
BURST = "step:rates=80/80/80/240/80/80/80/80/80/80/80/80/80,step_s=600"


@pytest.mark.parametrize("scale_in_to", ["one", "ds2"])
def test_a_burst_s_cores_go_back_in_the_next_window_within_its_budget(scale_in_to):
    cfg = SimConfig()
    app = AppView(cfg.app, cfg.r_max_ms, cfg.window_cron, cfg.window_minutes, cfg.window_max_actions)
    pc = POLICY_CONFIGS["threshold3_tuned"].with_overrides(scale_in_to=scale_in_to)
    s = run_simulation(pc, BURST, seed=1, plot=False)
    log = s["reconfiguration_log"]
    outs = [r for r in log if r["action"] == "scale_out"]
    assert outs and all(1800 <= r["t_s"] < 2400 + 300 for r in outs), outs
    peak = {st: max(r["to_cores"] for r in outs if r["stage"] == st) for st in {r["stage"] for r in outs}}
    after = [r for r in log if r["action"] == "scale_in" and r["t_s"] > 2400]
    for r in after:  # within the windows …
        assert maintenance_window(app, cfg.start + timedelta(seconds=r["t_s"])).open, r
    assert len(after) <= cfg.window_max_actions  # … and their budget
    if scale_in_to == "ds2":
        # one scale-in per stage, each straight to what 80 rows/s needs
        assert sorted(r["stage"] for r in after) == sorted(peak), after
        assert all(s["final_cores"][st] <= 2 for st in peak), s["final_cores"]
    else:  # one core per action: the budget runs out before the cores do
        assert len(after) == cfg.window_max_actions
        assert sum(peak[st] - s["final_cores"][st] for st in peak) == cfg.window_max_actions


def test_a_surge_sizes_every_stage_of_the_chain_once():
    """100 → 600 rows/s: every stage needs a multiple of its cores. Each sees the surge in its last
    seconds' rows, and a stage downstream in what reaches its upstream (which passes on only what
    its cores serve), so each scales out once, to cores that serve 600 rows/s below mpc's 85 %;
    sized on the window's mean and on its own arrivals, count went 2 → 4 → 12 and top10 1 → 6 → 8."""
    s = run_simulation("mpc", "step:rates=100/600,step_s=1800", seed=1, plot=False)
    outs = [r for r in s["reconfiguration_log"] if r["action"] == "scale_out"]
    assert sorted(r["stage"] for r in outs) == ["count", "parse", "top10"], outs
    rate = {sp.name: sp.rate_per_core for sp in SimConfig().stages}
    assert all(r["to_cores"] * rate[r["stage"]] * 0.85 >= 600 for r in outs), outs
    assert max(r["t_s"] for r in outs) - 1800 <= 180  # within three Application Manager cycles


def test_a_managed_run_starts_each_stage_at_what_its_first_seconds_input_needs():
    """As production sizes a start (plan.start_size): 350 rows/s at 100 rows/s per core and 70 %
    utilization is 5 cores; the next stage gets half (selectivity 0.5), 175 rows/s, 3 cores;
    StageSpec.cores is the floor. At that steady load the sized run needs no change and stays
    within R_max, where a run started at the floor must scale out first."""
    from streamops.plan.options import OperatorOptions
    from streamops.sim.model import StageSpec, sized_start

    stages = (StageSpec("a", rate_per_core=100.0, cores=1, max_cores=12, selectivity=0.5, state_bytes=0.0),
              StageSpec("b", rate_per_core=100.0, cores=1, max_cores=12, state_bytes=0.0),
              StageSpec("c", rate_per_core=1000.0, cores=2, max_cores=12, state_bytes=0.0))
    opts = OperatorOptions(catch_up_s=60.0, target_utilization=0.7)
    cfg = sized_start(SimConfig(stages=stages), 350.0, opts)
    assert [s.cores for s in cfg.stages] == [5, 3, 2], "c needs 1 core; its floor is 2"
    assert sized_start(SimConfig(stages=stages, sized_start=False), 350.0, opts).stages == stages
    assert sized_start(SimConfig(stages=stages, scripted=()), 350.0, opts).stages == stages, \
        "a replay starts as its run did"

    sized = run_simulation("recommended", "constant:rate=350", seed=1, plot=False, duration_s=900, stages=stages)
    floor = run_simulation("recommended", "constant:rate=350", seed=1, plot=False, duration_s=900, stages=stages,
                           sized_start=False)
    assert sized["reconfigurations_total"] == 0 and sized["seconds_above_rmax"] < floor["seconds_above_rmax"], \
        (sized["seconds_above_rmax"], floor["seconds_above_rmax"])
    assert floor["reconfigurations"].get("scale_out"), floor["reconfigurations"]
