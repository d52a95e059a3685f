"""Named control configurations: an Operator Manager policy plus option overrides.

Only option VALUES change here; the policies themselves are the production code in
`streamops.plan`. See docs/policies.md for what each option means and the bench that chose
`recommended`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from streamops.plan.operator import POLICIES as OPERATOR_POLICIES
from streamops.plan.options import AppOptions, OperatorOptions

OPERATOR_FIELDS = {f.name for f in fields(OperatorOptions)}
APP_FIELDS = {f.name for f in fields(AppOptions)}


@dataclass(frozen=True)
class PolicyConfig:
    """operator: edf | threshold3 | ds2 | mpc; operator_options / app_options: overrides of
    OperatorOptions / AppOptions (validated by their `from_params`)."""

    name: str
    operator: str = "edf"
    operator_options: dict[str, Any] = field(default_factory=dict)
    app_options: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        if self.operator not in OPERATOR_POLICIES:
            raise ValueError(f"unknown operator policy {self.operator!r}; valid: {sorted(OPERATOR_POLICIES)}")
        self.op_opts()  # validate early
        self.app_opts()

    def op_opts(self) -> OperatorOptions:
        return OperatorOptions.from_params(self.operator_options)

    def app_opts(self) -> AppOptions:
        return AppOptions.from_params(self.app_options)

    def with_overrides(self, **kw: Any) -> PolicyConfig:
        """Route `operator=`, OperatorOptions fields and AppOptions fields; others are an error."""
        op = dict(self.operator_options)
        app = dict(self.app_options)
        operator = kw.pop("operator", self.operator)
        for k, v in kw.items():
            if k in OPERATOR_FIELDS:
                op[k] = v
            elif k in APP_FIELDS:
                app[k] = v
            else:
                raise ValueError(f"{k!r} is neither an OperatorOptions nor an AppOptions field")
        return replace(self, operator=operator, operator_options=op, app_options=app)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "operator": self.operator, "operator_options": dict(self.operator_options),
                "app_options": dict(self.app_options), "description": self.description}


_BUCKET = {"policy": "token_bucket", "generator": "edf_step"}
_MPC = {"forecast": True, "forecast_season_s": 7200.0}

POLICY_CONFIGS: dict[str, PolicyConfig] = {
    "accept_all": PolicyConfig(
        "accept_all", "edf", {}, {"policy": "accept_all"},
        "EDF thresholds, every request granted at once (EDF's decentralized baseline)"),
    "edf_b050": PolicyConfig(
        "edf_b050", "edf", {}, {**_BUCKET, "beta": 0.5},
        "EDF thresholds + token bucket B=1, one token per interval while response > 0.5·R_max"),
    "edf_b075": PolicyConfig(
        "edf_b075", "edf", {}, {**_BUCKET, "beta": 0.75},
        "EDF's setup: EDF thresholds + token bucket B=1, beta 0.75"),
    "threshold3": PolicyConfig(
        "threshold3", "threshold3", {}, {**_BUCKET, "beta": 0.75},
        "fuzzy bottleneck score with three thresholds (pre-stage, DS2-sized scale-out) + token bucket beta 0.75"),
    "ds2": PolicyConfig(
        "ds2", "ds2", {}, {**_BUCKET, "beta": 0.75},
        "DS2 rate-based one-step sizing + token bucket beta 0.75"),
    # Chosen by bench/policies.py on the diurnal trace (3 seeds), `recommended` until issue 29: see docs/policies.md.
    "threshold3_tuned": PolicyConfig(
        "threshold3_tuned", "threshold3",
        {"scale_out_threshold": 75.0, "alarming_threshold": 55.0, "target_utilization": 0.6},
        {**_BUCKET, "beta": 0.75, "capacity": 2.0},
        "fuzzy bottleneck score: scale out above 75 (sized by DS2 at 60 % target utilization), "
        "pre-stage above 55; token bucket B = 2, beta 0.75"),
    # `threshold3_tuned` plus the input-rate forecast (docs/policies.md §4.1); 7200 s is the sim's compressed day.
    "predictive": PolicyConfig(
        "predictive", "threshold3",
        {"scale_out_threshold": 75.0, "alarming_threshold": 55.0, "target_utilization": 0.6,
         "forecast": True, "forecast_season_s": 7200.0},
        {**_BUCKET, "beta": 0.75, "capacity": 2.0},
        "threshold3_tuned (same options) plus predictive input: demand = max(measured, forecast peak over the "
        "next 600 s; Holt / Holt-Winters, season 7200 s = the sim's compressed day)"),
    # The receding-horizon controller (docs/policies.md §14.3): cores held + price × expected seconds
    # above R_max + the learned cost of a change, over the forecast with its spread; the price follows
    # the app's error budget (plan/budget.py), from 320, the price once chosen on the suite's training seeds.
    "mpc": PolicyConfig(
        "mpc", "mpc", _MPC,
        {**_BUCKET, "beta": 0.75, "capacity": 2.0},
        "receding horizon over 600 s priced in core-seconds, the price of a second above R_max following the "
        "error budget's burn rate (from 320 core-s), on the forecast with its spread and the learned change costs; "
        "token bucket B = 2, beta 0.75"),
    # The configuration with the least regret against the clairvoyant bound on the suite's training
    # seeds (bench/suite.py, docs/policies.md §14.2): today `mpc` at its default price.
    "recommended": PolicyConfig(
        "recommended", "mpc", _MPC,
        {**_BUCKET, "beta": 0.75, "capacity": 2.0},
        "the regret choice on the training seeds (§14): mpc, its price following the error budget"),
}


def resolve_policy(policy: str | PolicyConfig) -> PolicyConfig:
    if isinstance(policy, PolicyConfig):
        return policy
    try:
        return POLICY_CONFIGS[policy]
    except KeyError:
        raise ValueError(f"unknown policy config {policy!r}; named configs: {sorted(POLICY_CONFIGS)}") from None
