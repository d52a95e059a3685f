"""Every control option in one typed place, with its default and where the default comes from
(POLICIES.md). A stage's `policy.params` and an app's `control` block override these."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class OperatorOptions:
    """The Operator Manager: one per stage, fast local loop."""

    local_period_s: float = 30.0  # [000]
    window_s: float = 120.0  # ours; at most control.MAX_WINDOW_S
    stabilization_s: float = 60.0  # ours: ignore the first minute after a (re)start
    min_window_fill: float = 0.8  # decide only on a window at least this full
    # EDF thresholds [000]
    u_max: float = 0.7
    s_out: float = 0.7
    c: float = 0.75
    # three thresholds on the bottleneck score [001]; values are ours (the paper gives none)
    scale_in_threshold: float = 25.0
    alarming_threshold: float = 65.0
    scale_out_threshold: float = 80.0
    release_hysteresis: float = 10.0  # release pre-staged resources only below alarming − this
    # DS2-style sizing (goes beyond the papers)
    catch_up_s: float = 60.0
    target_utilization: float = 0.7
    ds2_scale_in_margin: float = 0.6  # scale in to the cores that keep utilization ≤ this (absolute), a band below target

    @classmethod
    def from_params(cls, params: dict[str, Any] | None) -> "OperatorOptions":
        return _from_params(cls, params)


@dataclass(frozen=True)
class AppOptions:
    """The Application Manager: one per app, slow loop (Airflow's re-plan)."""

    policy: str = "token_bucket"  # token_bucket | accept_all
    control_interval_s: float = 60.0  # [000] used 30 s
    capacity: float = 1.0  # B [000]
    beta: float = 0.75  # [000]
    generator: str = "edf_step"  # edf_step | proportional
    urgent_needs_growth: bool = True  # urgent = response > R_max and backlog growing

    @classmethod
    def from_params(cls, params: dict[str, Any] | None) -> "AppOptions":
        return _from_params(cls, params)


def _from_params(cls, params: dict[str, Any] | None):
    params = dict(params or {})
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(f"unknown {cls.__name__} option(s) {unknown}; valid: {sorted(known)}")
    base = cls()
    typed = {k: type(getattr(base, k))(v) for k, v in params.items()}
    return replace(base, **typed)
