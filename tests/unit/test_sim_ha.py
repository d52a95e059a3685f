"""Faults, replicas and the redundancy manager in the simulator (sim/faults.py, sim/ha.py).

Pure Python: no database, no Spark. A 30-minute run of one stage takes a fraction of a second.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import replace

import numpy as np
import pytest

from streamops.registry import Fault, Redundancy
from streamops.sim import load_trace, run_simulation
from streamops.sim.engine import Simulation
from streamops.sim.faults import Blocks, fault_schedule, parse_faults
from streamops.sim.model import SimConfig
from streamops.sim.policies import resolve_policy
from streamops.sim.run import COUNT_STAGE, HA_TRACE, ha_comparison

KILLS = (Fault(kind="driver_kill", mtbf_s=120),)


def _sim(faults=(), replicas: int = 1, redundancy=None, duration_s: int = 1800, seed: int = 1, **cfg_kw) -> Simulation:
    """One wordcount-like stage at fixed cores on a constant load, run to the end."""
    spec = replace(COUNT_STAGE, replicas=replicas, redundancy=redundancy, faults=tuple(faults))
    pc = resolve_policy("threshold3_tuned")
    sim = Simulation(SimConfig().with_overrides(stages=(spec,), **cfg_kw), pc.operator, pc.op_opts(), pc.app_opts(),
                     load_trace(HA_TRACE), duration_s, seed)
    sim.run()
    return sim


def _ha(faults=(), **kw) -> dict:
    spec = replace(COUNT_STAGE, faults=tuple(faults),
                   **{k: kw.pop(k) for k in ("replicas", "redundancy") if k in kw})
    return run_simulation("threshold3_tuned", HA_TRACE, duration_s=kw.pop("duration_s", 1800), stages=(spec,),
                          plot=False, **kw)["ha"]


# --------------------------------------------------------------------------------------------
# the fault schedule


def test_same_seed_same_faults_other_seed_other_faults():
    faults = [Fault(kind="driver_kill", mtbf_s=120), Fault(kind="slow_batch", mtbf_s=60)]
    a = fault_schedule(faults, 1800, seed=1, stage="wc")
    assert a == fault_schedule(faults, 1800, seed=1, stage="wc")
    assert a != fault_schedule(faults, 1800, seed=2, stage="wc")
    assert a != fault_schedule(faults, 1800, seed=1, stage="other")  # stages draw independently
    assert [e.t for e in a] == sorted(e.t for e in a) and {e.kind for e in a} == {"driver_kill", "slow_batch"}
    assert all(0 <= e.t < 1800 and e.magnitude_s >= 0 and 0 <= e.pick < 1 for e in a)
    # a fault's own seed fixes its draws whatever the run's seed
    pinned = [Fault(kind="db_outage", mtbf_s=100, seed=42)]
    assert fault_schedule(pinned, 1800, 1, "wc") == fault_schedule(pinned, 1800, 9, "wc")


def test_exponential_gaps_and_gaussian_magnitudes_cut_at_zero():
    ev = fault_schedule([Fault(kind="slow_batch", mtbf_s=50, magnitude_s=2.0, magnitude_sd_s=1.5)], 500_000, 3, "wc")
    gaps = np.diff([0.0] + [e.t for e in ev])
    assert gaps.mean() == pytest.approx(50, rel=0.03)
    assert np.median(gaps) == pytest.approx(50 * np.log(2), rel=0.05)  # exponential, not periodic
    mags = [e.magnitude_s for e in ev]
    assert min(mags) == 0.0 and statistics.mean(mags) == pytest.approx(2.0, rel=0.1)  # cut at 0 lifts the mean a bit


def test_fault_periods_restrict_injection():
    faults = [Fault(kind="driver_kill", mtbf_s=30)]
    every = fault_schedule(faults, 1800, 1, "wc")
    some = fault_schedule(faults, 1800, 1, "wc", periods=[(300, 600)])
    assert some and all(300 <= e.t < 600 for e in some)
    assert some == [e for e in every if 300 <= e.t < 600]  # the same draws, thinned


def test_parse_faults():
    fl = parse_faults("driver_kill:mtbf_s=120; slow_batch:mtbf_s=60,magnitude_s=3,magnitude_sd_s=0.5")
    assert [(f.kind, f.mtbf_s, f.magnitude_s) for f in fl] == [("driver_kill", 120, 5.0), ("slow_batch", 60, 3.0)]
    assert parse_faults([{"kind": "db_outage", "mtbf_s": 10}])[0].kind == "db_outage"
    assert parse_faults(None) == ()
    for bad, match in [("nap:mtbf_s=1", "unknown fault kind"), ("driver_kill:mtbf_s", "name=value"),
                       ("driver_kill:mtbf_s=0", "mtbf_s"), ("driver_kill:mtbf=1", "mtbf")]:
        with pytest.raises(ValueError, match=match):
            parse_faults(bad)


def test_blocks_merge_and_measure():
    b = Blocks()
    b.add(10, 20)
    b.add(30, 35)
    b.add(18, 25)  # overlaps the first
    b.add(25, 26)  # touches it
    assert list(zip(b.starts, b.ends, strict=True)) == [(10, 26), (30, 35)]
    assert b.overlap(9, 11) == 1 and b.overlap(20, 32) == 8 and b.overlap(40, 41) == 0
    assert b.end_at(12) == 26 and b.end_at(28) == 28 and b.remaining(33) == 2


# --------------------------------------------------------------------------------------------
# effects of each kind, one fault at a time


def _one(kind: str, magnitude: float = 5.0, replicas: int = 1, cores: int = 2, **cfg_kw):
    """A stage hit by exactly one fault of `kind` at t ≈ 300.1 (mtbf ≫ run, pinned by a seed)."""
    spec = replace(COUNT_STAGE, cores=cores, min_cores=cores, max_cores=cores, replicas=replicas)
    pc = resolve_policy("threshold3_tuned")
    sim = Simulation(SimConfig().with_overrides(stages=(spec,), **cfg_kw), pc.operator, pc.op_opts(), pc.app_opts(),
                     load_trace(f"constant:rate={65 * cores}"), 600, 1)
    from streamops.sim.faults import FaultEvent

    sim.stages[0].ha.events = [FaultEvent(300.1, kind, magnitude, 0.0)]
    sim.run()
    return sim.stages[0], sim


def test_driver_kill_stops_the_replica_for_restart_s_then_it_catches_up():
    st, _ = _one("driver_kill", restart_s=12.0)
    (f,) = st.ha.failures
    assert f.restart and f.mttr_s == pytest.approx(12.0) and f.output_gap_s == pytest.approx(12.0)
    assert st.processed[301:312].sum() == 0 and st.ha.stalled[301:312].all()
    assert st.backlog[312] > 1000  # 12 s of input waited
    after = st.backlog[313:]
    assert after[-1] < 1 and (st.ha.tail[313:] > st.ha.bound_ms).sum() > 5  # then a catch-up above the bound


def test_heartbeat_cut_is_harmless_until_detected_then_a_restart():
    st, _ = _one("heartbeat_cut", magnitude=10.0)  # shorter than the 15 s timeout
    (f,) = st.ha.failures
    assert f.start is None and not f.restart and st.ha.violated().sum() == 0
    st, _ = _one("heartbeat_cut", magnitude=20.0)
    (f,) = st.ha.failures
    assert f.restart and f.start == pytest.approx(315.1) and f.mttr_s == pytest.approx(10.0)
    assert st.processed[301:315].min() > 0 and st.processed[316:325].sum() == 0


@pytest.mark.parametrize("kind", ["slow_batch", "db_outage"])
def test_slow_batch_and_db_outage_stall_for_the_magnitude(kind):
    st, _ = _one(kind, magnitude=6.0)
    (f,) = st.ha.failures
    assert not f.restart and f.mttr_s is None and f.output_gap_s == pytest.approx(6.0)
    assert st.processed[301:306].sum() == 0 and st.processed[307] > 0


def test_executor_kill_loses_one_core_for_a_few_seconds():
    st, sim = _one("executor_kill", cores=2)
    (f,) = st.ha.failures
    assert f.start is None and f.output_gap_s == 0  # slower, not stopped
    assert st.processed[301:305].mean() == pytest.approx(100, rel=0.1)  # one core of two: 100 rows/s
    assert st.processed[310:320].mean() == pytest.approx(130, rel=0.1)  # back, caught up
    st, _ = _one("executor_kill", cores=1)  # its only core: stopped for executor_restart_s
    assert st.ha.failures[0].output_gap_s == pytest.approx(sim.cfg.executor_restart_s)


def test_a_second_replica_masks_a_kill():
    st, _ = _one("driver_kill", replicas=2)
    (f,) = st.ha.failures
    assert f.mttr_s == pytest.approx(10.0) and f.output_gap_s == 0
    assert st.ha.violated().sum() == 0 and st.processed[301:312].min() > 0


# --------------------------------------------------------------------------------------------
# whole runs


def test_no_faults_leaves_the_run_unchanged():
    """The HA code path without a fault (none in the run's window) is the fault-free model."""
    base = run_simulation("edf_b075", "steps", seed=4, duration_s=2400, plot=False)
    idle = run_simulation("edf_b075", "steps", seed=4, duration_s=2400, plot=False, faults="driver_kill:mtbf_s=60",
                          fault_periods=[(10**6, 2 * 10**6)])
    strip = lambda s: json.dumps({k: v for k, v in s.items() if k != "ha"}, sort_keys=True, default=str)  # noqa: E731
    assert strip(base) == strip(idle)
    total = base["ha"]["total"]
    assert total["failures_total"] == 0 and total["mttr_s"] is None and total["output_gap_s_per_failure"] is None
    assert total["replica_hours"] == pytest.approx(3 * 2400 / 3600)  # three stages, one replica each
    assert total["core_hours"] == base["core_hours"]


def test_rows_are_conserved_with_replicas_and_faults():
    faults = [Fault(kind="driver_kill", mtbf_s=90), Fault(kind="slow_batch", mtbf_s=45),
              Fault(kind="db_outage", mtbf_s=200)]
    for k in (1, 2, 3):
        st = _sim(faults, replicas=k).stages[0]
        assert st.processed.sum() + st.backlog_now == pytest.approx(st.arrivals.sum(), rel=1e-9)
        assert all(rp.q >= st.backlog_now - 1e-6 for rp in st.ha.replicas)  # nobody is ahead of the frontier


def test_two_static_replicas_mask_driver_kills():
    one = two = 0
    for seed in (1, 2, 3):
        h1 = _ha(KILLS, seed=seed)
        h2 = _ha(KILLS, seed=seed, replicas=2)
        assert h1["total"]["failures"] == h2["total"]["failures"]  # the same kills
        assert h1["total"]["output_gap_s_per_failure"] == pytest.approx(10.0)
        assert h2["total"]["output_gap_s_per_failure"] < 2.0
        assert h2["total"]["replica_hours"] == pytest.approx(2 * h1["total"]["replica_hours"])
        assert h2["total"]["core_hours"] == pytest.approx(2 * h1["total"]["core_hours"])
        one += h1["total"]["violated_windows"]
        two += h2["total"]["violated_windows"]
    assert one > 600
    assert two <= 0.1 * one  # ≥ 90 % fewer violated windows


def test_the_redundancy_manager_climbs_during_faults_and_comes_back_down():
    faults = [Fault(kind="driver_kill", mtbf_s=60)]
    kw = {"fault_periods": [(300, 900)]}
    rows = {r["setup"]: r for r in ha_comparison(HA_TRACE, seed=1, faults=faults, **kw)}
    one, two, mgr = rows["1 replica"], rows["2 static replicas"], rows["redundancy manager"]
    assert mgr["replica_hours"] < 0.85 * two["replica_hours"]
    assert mgr["violated_windows"] <= 0.5 * one["violated_windows"]
    assert two["violated_windows"] <= mgr["violated_windows"]
    h = _sim(faults, redundancy=Redundancy(), **kw).stages[0].ha
    n = h.n_replicas
    assert n[:300].max() == 1 and n[300:900].max() == 2 and n[-60:].max() == 1  # up while faults strike, down after
    assert [e["action"] for e in h.log][:2] == ["add_replica", "remove_replica"]
    assert all(e["reason"] for e in h.log)


def test_replica_changes_are_recorded_as_granted_decisions():
    s = run_simulation("threshold3_tuned", HA_TRACE, duration_s=1800, plot=False, faults=list(KILLS), redundancy=True,
                       stages=(COUNT_STAGE,))
    st = s["ha"]["stages"]["count"]
    adds = sum(e["action"] == "add_replica" for e in st["replica_log"])
    assert adds >= 1 and s["decisions"]["add_replica"]["granted"] == adds
    assert st["redundancy_r_final"] is not None and st["replicas_max"] == 2
    log = st["replica_log"][0]
    assert {"t_s", "replica", "replicas_before", "replicas", "r_before", "r", "tail_p90_ms", "reason"} <= set(log)


def test_replica_changes_go_through_the_application_manager():
    """Adding a replica spends a token: with an empty bucket every add is declined; removing is free."""
    s = run_simulation("threshold3_tuned", HA_TRACE, duration_s=1800, plot=False, faults=list(KILLS), redundancy=True,
                       stages=(COUNT_STAGE,), capacity=0.0)
    st = s["ha"]["stages"]["count"]
    assert s["decisions"]["add_replica"]["declined"] >= 3 and s["decisions"]["add_replica"]["granted"] == 0
    assert st["replicas_max"] == 1 and st["replica_log"] == []
    granted = run_simulation("threshold3_tuned", HA_TRACE, duration_s=1800, plot=False, faults=list(KILLS),
                             redundancy=True, stages=(COUNT_STAGE,))
    log = granted["ha"]["stages"]["count"]["replica_log"]
    assert any(e["action"] == "remove_replica" for e in log)
    assert all(e["grant"] and e["requested_t_s"] == e["t_s"] for e in log)  # filed and granted in the same cycle
    assert granted["decisions"]["remove_replica"]["granted"] == sum(e["action"] == "remove_replica" for e in log)


def test_new_replica_starts_after_restart_s_with_the_leaders_backlog():
    h = _sim(KILLS, redundancy=Redundancy(), restart_s=7.0).stages[0].ha
    add = next(e for e in h.log if e["action"] == "add_replica")
    rp = next(r for r in h.replicas + h.retired if r.id == add["replica"])
    assert rp.born == add["t_s"] and rp.blocks.end_at(rp.born) == pytest.approx(add["t_s"] + 7.0)


def test_replicas_and_redundancy_validation():
    with pytest.raises(ValueError, match="replicas"):
        replace(COUNT_STAGE, replicas=0)
    with pytest.raises(ValueError):
        replace(COUNT_STAGE, redundancy={"max_replicas": 9})
    with pytest.raises(ValueError):
        replace(COUNT_STAGE, faults=[{"kind": "driver_kill"}])  # mtbf_s is required
    spec = replace(COUNT_STAGE, redundancy={"period_s": 30, "params": {"r_min": 0.5}},
                   faults=[{"kind": "slow_batch", "mtbf_s": 60}])
    assert spec.redundancy.period_s == 30 and spec.faults[0].kind == "slow_batch"
    h = _sim(redundancy=spec.redundancy, duration_s=300).stages[0].ha
    assert h.n_replicas[0] == 2  # r_min 0.5 keeps a standby from the start
