"""Summaries and the Fig. 4-style plot of a simulation run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from streamops.plan.model import RECONFIGURATIONS
from streamops.plan.stability import churn
from streamops.sim.traces import change_points

if TYPE_CHECKING:
    from streamops.sim.engine import Simulation
    from streamops.sim.faults import Failure

SUMMARY_KEYS = (
    "policy", "trace", "seed", "duration_s", "availability", "downtime_s", "seconds_above_rmax",
    "violated_windows", "reconfigurations", "core_hours", "convergence_decisions", "convergence_decisions_max",
)


def convergence(sim: Simulation) -> list[dict[str, Any]]:
    """For each step change of the trace: the decisions from the change until the response stays
    ≤ R_max for `settle_s` seconds. A decision is an Application Manager cycle that granted
    reconfigurations, of one stage or several at once, as DS2 counts one scaling decision for the
    whole dataflow; `grants` counts the stage reconfigurations. A change whose segment (up to the
    next change) never settles counts every decision of the segment and has settled = False."""
    T, r_max, settle = sim.T, sim.cfg.r_max_ms, int(sim.cfg.settle_s)
    ok = sim.response <= r_max
    changes = change_points(sim.trace, T)
    grants = sorted(rc.t for rc in sim.reconfigs)
    out = []
    for i, (t0, before, after) in enumerate(changes):
        end = changes[i + 1][0] if i + 1 < len(changes) else T
        settled_at = None
        run = 0
        for s in range(t0, end):
            run = run + 1 if ok[s] else 0
            if run >= settle:
                settled_at = s - settle + 1
                break
        until = settled_at if settled_at is not None else end
        granted = [g for g in grants if t0 <= g < until]
        out.append({"t_s": t0, "rate_before": round(before, 1), "rate_after": round(after, 1),
                    "decisions": len(set(granted)), "grants": len(granted), "settled": settled_at is not None,
                    "settle_after_s": None if settled_at is None else settled_at - t0})
    return out


def summarize(sim: Simulation, policy: dict[str, Any], trace_name: str) -> dict[str, Any]:
    T = sim.T
    r_max = sim.cfg.r_max_ms
    downtime = float(sim.down.sum())
    by_action = {a: 0 for a in RECONFIGURATIONS}
    by_mech: dict[str, int] = {}
    for rc in sim.reconfigs:
        by_action[rc.action] = by_action.get(rc.action, 0) + 1
        by_mech[rc.mechanism] = by_mech.get(rc.mechanism, 0) + 1
    conv = convergence(sim)
    conv_n = [c["decisions"] for c in conv]
    above_mask = sim.response > r_max
    above = int(above_mask.sum())
    disturbed = np.zeros(T, dtype=bool)  # from a grant to 60 s after the restart
    for rc in sim.reconfigs:
        disturbed[int(rc.t):min(T, int(np.ceil(rc.down_end)) + 60)] = True
    # A suite trace says how long its (compressed) day is; any other trace counts real days.
    flips = churn(((rc.t, rc.stage, rc.from_cores, rc.to_cores) for rc in sim.reconfigs), len(sim.stages), T,
                  float(sim.trace.meta.get("day_s", 86400.0)))
    return {
        "policy": policy["name"],
        "trace": trace_name,
        "seed": sim.seed,
        "duration_s": T,
        "availability": round(1.0 - downtime / T, 6) if T else 1.0,
        "downtime_s": round(downtime, 2),
        "seconds_above_rmax": above,
        "violated_windows": int((sim.response_p90 > r_max).sum()),
        "seconds_above_rmax_reconfig": int((above_mask & disturbed).sum()),
        "sla_compliance": round(1.0 - above / T, 6) if T else 1.0,
        "reconfigurations": by_action,
        "reconfigurations_total": len(sim.reconfigs),
        **flips,
        "mechanisms": by_mech,
        "core_hours": round(sim.core_seconds / 3600.0, 4),
        "convergence_decisions": conv_n,
        "convergence_decisions_max": max(conv_n) if conv_n else 0,
        "convergence_grants_max": max((c["grants"] for c in conv), default=0),
        "convergence": conv,
        "decisions": sim.decisions,
        "requests": sim.requests_made,
        "response_mean_ms": round(float(sim.response.mean()), 2),
        "response_p50_ms": round(float(np.percentile(sim.response, 50)), 2),
        "response_p95_ms": round(float(np.percentile(sim.response, 95)), 2),
        "r_max_ms": r_max,
        "beta": sim.app_opts.beta,
        "app_policy": sim.app_opts.policy,
        "operator": sim.operator,
        "policy_config": policy,
        "trace_description": sim.trace.description,
        "final_cores": {st.spec.name: int(st.n) for st in sim.stages},
        "max_cores_used": {st.spec.name: int(st.cores.max()) for st in sim.stages},
        "rows_in": round(float(sim.rate.sum()), 1),
        "backlog_end": {st.spec.name: round(float(st.backlog_now), 1) for st in sim.stages},
        "reconfiguration_log": [rc.as_dict() for rc in sim.reconfigs],
        "ha": ha_summary(sim),
    }


def _mean(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 3) if xs else None


def _ha_figures(failures: list[Failure], violated: int, replica_s: float, core_s: float) -> dict[str, Any]:
    by_kind: dict[str, int] = {}
    for f in failures:
        by_kind[f.kind] = by_kind.get(f.kind, 0) + 1
    mttr = [f.mttr_s for f in failures if f.restart and f.mttr_s is not None]
    gaps = [f.output_gap_s for f in failures]
    return {"violated_windows": violated, "failures": by_kind, "failures_total": len(failures),
            "restarts": sum(f.restart for f in failures), "mttr_s": _mean(mttr),
            "output_gap_s_per_failure": _mean(gaps), "output_gap_s_total": round(sum(gaps), 3),
            "replica_hours": round(replica_s / 3600.0, 4), "core_hours": round(core_s / 3600.0, 4)}


def ha_summary(sim: Simulation) -> dict[str, Any]:
    """Faults, replicas and the redundancy manager (sim/ha.py), per stage and in total.

    violated_windows: 1-second windows where the stage's tail (worst) response time exceeds its
    bound (redundancy.bound_ms, else R_max) or its output stalled while rows were pending; the
    total counts a second once if any stage violated it. mttr_s: mean time from a driver kill
    (or a detected heartbeat cut) until the replica processes again. output_gap_s_per_failure:
    mean over failures of the stage's output stall within the failure's stop (0 when masked).
    """
    stages: dict[str, Any] = {}
    any_violated = np.zeros(sim.T, dtype=bool)
    for st in sim.stages:
        h = st.ha
        v = h.violated()
        any_violated |= v
        stages[st.spec.name] = {
            **_ha_figures(h.failures, int(v.sum()), float(h.n_replicas.sum()), h.core_seconds),
            "bound_ms": h.bound_ms,
            "replicas_initial": int(h.n_replicas[0]) if sim.T else len(h.replicas),
            "replicas_final": len(h.replicas),
            "replicas_max": int(h.n_replicas.max()) if sim.T else len(h.replicas),
            "replicas_mean": round(float(h.n_replicas.mean()), 3) if sim.T else float(len(h.replicas)),
            "redundancy_r_final": None if h.manager is None else round(h.manager.state.r, 3),
            "replica_log": h.log,
            "failure_log": [f.as_dict() for f in h.failures],
        }
    failures = [f for st in sim.stages for f in st.ha.failures]
    total = _ha_figures(failures, int(any_violated.sum()), float(sum(st.ha.n_replicas.sum() for st in sim.stages)),
                        sim.core_seconds)
    return {"total": total, "stages": stages}


_MARK = {"scale_out": "^", "scale_in": "v", "migrate": "x"}


def plot(sim: Simulation, path: Path, title: str) -> Path:
    """Top: response time with R_max and β·R_max; bottom: cores per stage, reconfigurations
    marked, and the input rate (grey, right axis)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.arange(sim.T) / 60.0
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True, height_ratios=[3, 2])
    ax1.plot(t, sim.response, lw=0.6, color="tab:blue", label="response time (sum of stage latencies)")
    r_max, beta = sim.cfg.r_max_ms, sim.app_opts.beta
    ax1.axhline(r_max, color="tab:red", lw=1.0, label=f"R_max = {r_max:g} ms")
    ax1.axhline(beta * r_max, color="tab:orange", lw=1.0, ls="--", label=f"β·R_max (β = {beta:g})")
    ax1.set_yscale("log")
    ax1.set_ylabel("response time (ms, log)")
    ax1.legend(loc="upper left", fontsize=8)
    ax1.set_title(title, fontsize=10)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, st in enumerate(sim.stages):
        c = colors[i % len(colors)]
        ax2.step(t, st.cores, where="post", color=c, lw=1.2, label=f"{st.spec.name} cores")
        if st.ha.n_replicas.max() > 1:
            ax2.step(t, st.cores * st.ha.n_replicas, where="post", color=c, lw=0.8, ls="--",
                     label=f"{st.spec.name} cores × replicas")
        for rc in (r for r in sim.reconfigs if r.stage == st.spec.name):
            ax2.plot(rc.t / 60.0, rc.to_cores, marker=_MARK.get(rc.action, "o"), color=c, ms=6, ls="none")
    ax2.set_ylabel("replicas (cores)")
    ax2.set_xlabel("simulated time (min)")
    ax2.legend(loc="upper left", fontsize=8)
    ax3 = ax2.twinx()
    ax3.plot(t, sim.rate, color="0.6", lw=0.8)
    ax3.set_ylabel("input rows/s", color="0.5")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
