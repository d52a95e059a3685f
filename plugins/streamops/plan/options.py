"""Every control option in one typed place, with its default and where the default comes from
(POLICIES.md). A stage's `policy.params` and an app's `control` block override these."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar


@dataclass(frozen=True)
class OperatorOptions:
    """The Operator Manager: one per stage, fast local loop."""

    local_period_s: float = 30.0  # [000]
    window_s: float = 120.0  # ours
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
    # scale in to the cores that keep utilization ≤ this (absolute), a band below target
    ds2_scale_in_margin: float = 0.6
    # Predictive input (docs/policies.md §4.1): demand = max(measured, forecast peak over the horizon)
    forecast: bool = False
    forecast_horizon_s: float = 600.0  # how far ahead to ask: a scale-out's restart + stabilization + window
    forecast_season_s: float = 86400.0  # the candidate season (a day); Holt-Winters from two seasons of history
    # issue 46: use the season only once the history shows it (analyze.season); false: assume it, as before
    forecast_season_learn: bool = True
    forecast_max_skill: float = 1.0  # mpc plans without a forecast whose recent error is above this × the naive one's
    forecast_bucket_s: float = 60.0  # the forecaster's time step: input rate averaged per bucket
    # Giving cores back (edf, threshold3): "one" core per scale-in, as the papers do, or "ds2": one
    # scale-in straight to DS2's n* at ds2_scale_in_margin, asked whenever that is below n and the
    # stage is not alarming. A window's budget then returns a burst's cores in one action per stage.
    scale_in_to: str = "one"
    # The receding-horizon controller (`mpc`, docs/policies.md §14.3). slo_price is its one knob: the
    # core-seconds one second above the app's R_max is worth (each of its k stages prices its own
    # with 1/k of it); the default is the one chosen on the suite's training seeds (bench/suite.py).
    # The others are its model, not knobs to tune per app.
    slo_price: float = 320.0  # bench/suite.py, training seeds: the lowest price that keeps goal A's 99.5 %
    mpc_horizon_s: float = 600.0  # plan this far ahead: a restart, its catch-up and the forecast's reach
    mpc_step_s: float = 60.0  # one step of the plan: the Application Manager's interval
    mpc_max_utilization: float = 0.85  # above it a stage's queueing alone eats its share of R_max
    mpc_rate_sd: float = 0.10  # the demand's relative spread when the forecast gives less (the suite's noise)

    def __post_init__(self) -> None:
        # The bottleneck score lives in [13.3, 86.7] (analyze.fuzzy): thresholds outside never fire.
        lo, hi = 13.3, 86.7
        if not lo < self.scale_in_threshold < self.alarming_threshold < self.scale_out_threshold < hi:
            raise ValueError(
                f"expected {lo} < scale_in_threshold < alarming_threshold < scale_out_threshold < {hi}, got "
                f"{self.scale_in_threshold} / {self.alarming_threshold} / {self.scale_out_threshold}")
        # margin == target leaves no band but still cannot flap: scale-in stops at DS2's own n*.
        if not 0 < self.target_utilization <= 1 or not 0 < self.ds2_scale_in_margin <= self.target_utilization:
            raise ValueError("expected 0 < ds2_scale_in_margin <= target_utilization <= 1")
        if self.forecast_horizon_s < 0 or self.forecast_season_s < 0 or self.forecast_bucket_s <= 0:
            raise ValueError("expected forecast_horizon_s >= 0, forecast_season_s >= 0 and forecast_bucket_s > 0")
        if self.slo_price < 0 or not 0 < self.mpc_max_utilization <= 1 or self.mpc_rate_sd < 0:
            raise ValueError("expected slo_price >= 0, 0 < mpc_max_utilization <= 1 and mpc_rate_sd >= 0")
        if self.mpc_step_s <= 0 or self.mpc_horizon_s < self.mpc_step_s:
            raise ValueError("expected mpc_step_s > 0 and mpc_horizon_s >= mpc_step_s")
        if self.scale_in_to not in ("one", "ds2"):
            raise ValueError(f"scale_in_to must be 'one' or 'ds2', got {self.scale_in_to!r}")

    @classmethod
    def from_params(cls, params: dict[str, Any] | None) -> OperatorOptions:
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
    # What holding a core costs, in gain units per core-hour (0: cores are free, as in [000]).
    # Cores added now can next be given back in the maintenance window after the one that is
    # open or next: a scale-out's gain is net of holding its new cores until then, one that
    # gains nothing net is declined unless urgent, and a scale-in's gain adds the holding it saves.
    core_hour_cost: float = 0.0
    # No flip-flops, no scale-in while catching up (plan/stability.py, docs/policies.md §7.1).
    scale_down_delay_s: float = 3600.0  # a scale-in is granted once asked for this long (Flink: scale-down.interval)
    reversal_interval_s: float = 900.0  # a change reversing one granted less than this ago is declined
    drain_backlog_s: float = 10.0  # more than this many seconds of input queued: draining, no scale-in

    def __post_init__(self) -> None:
        if min(self.scale_down_delay_s, self.reversal_interval_s, self.drain_backlog_s) < 0:
            raise ValueError("expected scale_down_delay_s, reversal_interval_s and drain_backlog_s >= 0")
        if not 0 < self.beta <= 1:
            raise ValueError(f"expected 0 < beta <= 1, got {self.beta}")
        if self.capacity < 0:  # below 1 is legal: a bucket that never grants (recommend-only in effect)
            raise ValueError(f"expected capacity >= 0 tokens, got {self.capacity}")
        if self.core_hour_cost < 0:
            raise ValueError(f"expected core_hour_cost >= 0, got {self.core_hour_cost}")

    @classmethod
    def from_params(cls, params: dict[str, Any] | None) -> AppOptions:
        return _from_params(cls, params)


def _coerce(default: Any, value: Any) -> Any:
    if isinstance(default, bool):
        if isinstance(value, str):
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(f"expected a boolean, got {value!r}")
            return value.lower() in ("true", "1", "yes")
        return bool(value)
    return type(default)(value)


_Options = TypeVar("_Options", "OperatorOptions", "AppOptions")


def _from_params(cls: type[_Options], params: dict[str, Any] | None) -> _Options:
    # Thousands of stages share a handful of parameter sets: parse each set once.
    key = json.dumps(params or {}, sort_keys=True, default=str)
    # lru_cache keeps no type parameter; and mypy finds a class object unhashable (its __hash__ is the metaclass's)
    parsed: _Options = _parsed(cls, key)  # type: ignore[arg-type]
    return parsed


@functools.lru_cache(maxsize=4096)
def _parsed(cls: type[Any], key: str) -> Any:
    params = json.loads(key)
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} option(s) {unknown}; valid: {sorted(known)}")
    base = cls()
    return replace(base, **{k: _coerce(getattr(base, k), v) for k, v in params.items()})
