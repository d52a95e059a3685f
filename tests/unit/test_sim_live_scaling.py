"""Issue 46 item 4 in the simulator and the bound: on a standalone pool a change within the state
partitions is live (no outage, no checkpoint), so a scale-in needs no maintenance window; on a
local pool every change restarts the driver and scale-ins wait for the window. The simulator
decides it with production's own test (plan.change.live_scale_in) and choice (plan.mechanisms)."""

from __future__ import annotations

from datetime import timedelta

from streamops.plan.application import AppView, maintenance_window
from streamops.plan.options import AppOptions
from streamops.sim import SimConfig, run_simulation
from streamops.sim.bound import model_from_sim, window_open_mask

TRACE = "suite:diurnal_noise:1"  # a training seed: two compressed days, one window a day


def _outside_window(cfg: SimConfig, t_s: float) -> bool:
    app = AppView(cfg.app, cfg.r_max_ms, cfg.window_cron, cfg.window_minutes, cfg.window_max_actions)
    return not maintenance_window(app, cfg.start + timedelta(seconds=t_s)).open


def test_a_standalone_pool_scales_in_live_outside_the_window_and_a_local_one_waits_for_it():
    cfg = SimConfig()
    runs = {kind: run_simulation("ds2", TRACE, seed=1, plot=False, pool_kind=kind) for kind in ("local", "standalone")}
    live_ins = [r for r in runs["standalone"]["reconfiguration_log"] if r["action"] == "scale_in"]
    assert live_ins and all(r["mechanism"] == "live" and r["downtime_s"] == 0.0 for r in live_ins), live_ins
    assert any(_outside_window(cfg, r["t_s"]) for r in live_ins), "no scale-in outside the window"
    local_ins = [r for r in runs["local"]["reconfiguration_log"] if r["action"] == "scale_in"]
    assert not any(_outside_window(cfg, r["t_s"]) for r in local_ins), local_ins
    assert runs["standalone"]["core_hours"] < runs["local"]["core_hours"], "cores given back sooner"


def test_the_bound_lets_a_standalone_pool_scale_in_at_any_interval_without_an_outage():
    local, cluster = SimConfig(), SimConfig(pool_kind="standalone")
    m_local, m_cluster = model_from_sim(local, AppOptions()), model_from_sim(cluster, AppOptions())
    assert all(s.scale_in_s > 0 and s.scale_out_s > 0 for s in m_local.stages)
    assert all(s.scale_in_s == 0 and s.scale_out_s == 0 for s in m_cluster.stages)
    assert m_cluster.window_max_actions == len(m_cluster.stages)
    assert not all(window_open_mask(local, 14_400, 60)) and all(window_open_mask(cluster, 14_400, 60))
