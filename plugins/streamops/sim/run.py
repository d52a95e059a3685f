"""`run_simulation`: one policy on one trace with one seed; `ha_comparison`: one replica, static
replicas and the redundancy manager under the same faults."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from streamops.plan.redundancy import RedundancyOptions
from streamops.registry import Fault, Redundancy
from streamops.sim.engine import Simulation
from streamops.sim.faults import parse_faults
from streamops.sim.model import SimConfig, StageSpec, sized_start
from streamops.sim.policies import APP_FIELDS, OPERATOR_FIELDS, PolicyConfig, resolve_policy
from streamops.sim.report import plot, summarize
from streamops.sim.trace_loader import load_trace


def run_simulation(policy: str | PolicyConfig, trace: str, seed: int = 1, out_dir: Path | None = None,
                   duration_s: float | None = None, faults: str | Sequence[Any] | None = None,
                   replicas: int | None = None, redundancy: bool | dict[str, Any] | Redundancy | None = None,
                   **overrides: Any) -> dict[str, Any]:
    """Simulate `policy` (a name in POLICY_CONFIGS or a PolicyConfig) on `trace` (a built-in
    name, a generator spec or a CSV path) and return the summary dict.

    overrides: SimConfig fields (stages, r_max_ms, mechanism, noise, window_cron, plot …),
    `operator=` (edf|threshold3|ds2), and any OperatorOptions / AppOptions field (beta,
    target_utilization …), which are applied to the policy. With `out_dir`, writes
    out_dir/summary.json and (unless plot=False) out_dir/response.png.

    faults (a spec `driver_kill:mtbf_s=120;slow_batch:mtbf_s=60,magnitude_s=3` or a list of
    registry.Fault / dicts), replicas and redundancy (True, a dict or a registry.Redundancy) set
    those fields on every stage; give `stages=` for per-stage settings. restart_s,
    executor_restart_s, heartbeat_timeout_s and fault_periods are SimConfig fields.
    """
    pc = resolve_policy(policy)
    sim_fields = SimConfig.field_names()
    sim_kw = {k: v for k, v in overrides.items() if k in sim_fields}
    pol_kw = {k: v for k, v in overrides.items() if k not in sim_fields}
    bad = [k for k in pol_kw if k != "operator" and k not in OPERATOR_FIELDS and k not in APP_FIELDS]
    if bad:
        raise ValueError(f"unknown override(s) {bad}: not a SimConfig, OperatorOptions or AppOptions field")
    if pol_kw:
        pc = pc.with_overrides(**pol_kw)
    cfg = SimConfig().with_overrides(**sim_kw)
    ha_kw: dict[str, Any] = {}
    if faults is not None:
        ha_kw["faults"] = parse_faults(faults)
    if replicas is not None:
        ha_kw["replicas"] = replicas
    if redundancy is not None:
        ha_kw["redundancy"] = redundancy
    if ha_kw:
        cfg = replace(cfg, stages=tuple(StageSpec(**{**s.__dict__, **ha_kw}) for s in cfg.stages))
    tr = load_trace(trace)
    duration = int(math.ceil(duration_s if duration_s is not None else tr.default_duration_s))
    if duration <= 0:
        raise ValueError("duration_s must be > 0")
    op_opts = pc.op_opts()
    cfg = sized_start(cfg, tr.rows(0), op_opts)
    sim = Simulation(cfg, pc.operator, op_opts, pc.app_opts(), tr, duration, seed)
    sim.run()
    summary = summarize(sim, pc.as_dict(), str(trace))
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        if cfg.plot:
            png = plot(sim, out / "response.png",
                       f"{pc.name} ({pc.operator} + {sim.app_opts.policy}) on {trace}, seed {seed}: "
                       f"availability {summary['availability']:.3%}, {summary['seconds_above_rmax']} s > R_max, "
                       f"{summary['reconfigurations_total']} reconfigurations")
            summary["response_png"] = str(png)
        summary["summary_json"] = str(out / "summary.json")
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


# A count-by-key stage (HiBench-like) (stateful count by key) at fixed cores, so that only the faults
# and the replicas move its latency: 2 cores of 100 rows/s at 130 rows/s is 65 % busy.
COUNT_STAGE = StageSpec("count", rate_per_core=100.0, cores=2, min_cores=2, max_cores=2,
                            state_bytes=50e6, base_latency_ms=50.0)
HA_TRACE = "constant:rate=130"


def ha_comparison(trace: str = HA_TRACE, seed: int = 1, mtbf_s: float | None = 120.0, *,
                  slow_mtbf_s: float | None = None, faults: str | Sequence[Any] | None = None,
                  stage: StageSpec = COUNT_STAGE, duration_s: float | None = 1800.0, static_replicas: int = 2,
                  max_replicas: int = 2, period_s: float = 60.0, redundancy_params: dict[str, Any] | None = None,
                  policy: str | PolicyConfig = "threshold3_tuned", **overrides: Any) -> list[dict[str, Any]]:
    """One stage under the same faults as (a) 1 replica, (b) `static_replicas` static replicas,
    (c) the redundancy manager (1 … `max_replicas`). Faults: driver kills every `mtbf_s` (None:
    none) and slow batches every `slow_mtbf_s` (Fault's default magnitude), or `faults` instead.
    overrides: as run_simulation (restart_s, fault_periods, r_max_ms …). One row per setup."""
    kinds: tuple[tuple[Literal["driver_kill", "slow_batch"], float | None], ...] = (
        ("driver_kill", mtbf_s), ("slow_batch", slow_mtbf_s))
    fl = parse_faults(faults) if faults is not None else tuple(Fault(kind=k, mtbf_s=m) for k, m in kinds if m)
    manager = Redundancy(max_replicas=max_replicas, period_s=period_s,
                         params=RedundancyOptions.from_params(redundancy_params))
    setups = [("1 replica", 1, None), (f"{static_replicas} static replicas", static_replicas, None),
              ("redundancy manager", 1, manager)]
    rows = []
    for name, k, red in setups:
        spec = replace(stage, replicas=k, redundancy=red, faults=fl)
        s = run_simulation(policy, trace, seed=seed, duration_s=duration_s, stages=(spec,), plot=False, **overrides)
        total, st = s["ha"]["total"], s["ha"]["stages"][stage.name]
        rows.append({"setup": name, "seed": seed, "duration_s": s["duration_s"],
                     "violated_windows": total["violated_windows"],
                     "violated_share": round(total["violated_windows"] / max(1, s["duration_s"]), 4),
                     "replica_hours": total["replica_hours"], "core_hours": total["core_hours"],
                     "mttr_s": total["mttr_s"], "output_gap_s_per_failure": total["output_gap_s_per_failure"],
                     "output_gap_s_total": total["output_gap_s_total"], "failures": total["failures_total"],
                     "failures_by_kind": total["failures"], "replicas_mean": st["replicas_mean"],
                     "replicas_max": st["replicas_max"], "replica_changes": len(st["replica_log"]),
                     "response_p95_ms": s["response_p95_ms"]})
    return rows
