"""Trace-driven simulator: a 1-second model of an app's stages that drives the production
Operator Manager (`plan.operator.operator_cycle`) and Application Manager
(`plan.application.application_cycle`) unchanged. See docs/policies.md.

    from streamops.sim import run_simulation
    summary = run_simulation("edf_b075", "diurnal", seed=1, out_dir=Path("bench/results/x"))
    rows = ha_comparison("constant:rate=130", seed=1, mtbf_s=120, slow_mtbf_s=60)  # faults and replicas
    summary = run_simulation("predictive", "suite:flash_crowd:101")  # the trace suite (sim/suite.py)

The trace suite (`sim/suite.py`) has seeded families with a train/test split (bench/suite.py
tunes on the first only); `sim/calibrate.py` fits the model to a real run and replays it
(`streamops sim --calibrate`).
"""

from streamops.sim.faults import parse_faults
from streamops.sim.model import DEFAULT_STAGES, SimConfig, StageSpec
from streamops.sim.policies import POLICY_CONFIGS, PolicyConfig, resolve_policy
from streamops.sim.report import SUMMARY_KEYS
from streamops.sim.run import ha_comparison, run_simulation
from streamops.sim.trace_loader import load_trace
from streamops.sim.traces import BUILTIN as BUILTIN_TRACES
from streamops.sim.traces import SimTrace

__all__ = [
    "BUILTIN_TRACES",
    "DEFAULT_STAGES",
    "POLICY_CONFIGS",
    "SUMMARY_KEYS",
    "PolicyConfig",
    "SimConfig",
    "SimTrace",
    "StageSpec",
    "ha_comparison",
    "load_trace",
    "parse_faults",
    "resolve_policy",
    "run_simulation",
]
