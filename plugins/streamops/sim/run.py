"""`run_simulation`: one policy on one trace with one seed."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from streamops.sim.engine import Simulation
from streamops.sim.model import SimConfig
from streamops.sim.policies import APP_FIELDS, OPERATOR_FIELDS, PolicyConfig, resolve_policy
from streamops.sim.report import plot, summarize
from streamops.sim.traces import load_trace


def run_simulation(policy: str | PolicyConfig, trace: str, seed: int = 1, out_dir: Path | None = None,
                   duration_s: float | None = None, **overrides: Any) -> dict[str, Any]:
    """Simulate `policy` (a name in POLICY_CONFIGS or a PolicyConfig) on `trace` (a built-in
    name, a generator spec or a CSV path) and return the summary dict.

    overrides: SimConfig fields (stages, r_max_ms, mechanism, noise, window_cron, plot …),
    `operator=` (edf|threshold3|ds2), and any OperatorOptions / AppOptions field (beta,
    target_utilization …), which are applied to the policy. With `out_dir`, writes
    out_dir/summary.json and (unless plot=False) out_dir/response.png.
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
    tr = load_trace(trace)
    duration = int(math.ceil(duration_s if duration_s is not None else tr.default_duration_s))
    if duration <= 0:
        raise ValueError("duration_s must be > 0")
    sim = Simulation(cfg, pc.operator, pc.op_opts(), pc.app_opts(), tr, duration, seed)
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
