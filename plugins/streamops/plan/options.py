"""Every control option declared once (POLICIES.md gives the defaults): its key, type, default,
description and old spellings, in the manner of Flink's `ConfigOptions.key(..).withFallbackKeys(..)`.
A stage's `policy.params` and an app's `control` block override these; docs/registry.md's option
tables are generated from the declarations (`python -m streamops.registry_docs`)."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any, TypeVar


def option(default: Any, description: str, *, old: Sequence[str] = (), choices: Sequence[str] = ()) -> Any:
    """One option's declaration: `old` are its former keys, read when the key itself is absent."""
    return field(default=default, metadata={"description": description, "old": tuple(old),
                                            "choices": tuple(choices)})


def declared(cls: type) -> list[Field[Any]]:
    """The options of an options class, in declaration order (each field's metadata: description,
    old, choices)."""
    return list(fields(cls))


def by_key(cls: type, params: dict[str, Any] | None) -> dict[str, Any]:
    """`params` keyed by the declared keys: an old spelling stands in for an absent key, in the
    order declared; any other key is refused, naming the valid ones."""
    params = dict(params or {})
    out: dict[str, Any] = {}
    for f in declared(cls):
        spelling = next((k for k in (f.name, *f.metadata.get("old", ())) if k in params), None)
        if spelling is not None:
            out[f.name] = params[spelling]
        for k in (f.name, *f.metadata.get("old", ())):
            params.pop(k, None)
    if params:
        known = sorted(f.name for f in declared(cls))
        raise ValueError(f"unknown {cls.__name__} option(s) {sorted(params)}; valid: {known}")
    return out


def check_choices(opts: Any) -> None:
    """A string option declared with choices takes one of them."""
    for f in declared(type(opts)):
        allowed = f.metadata.get("choices", ())
        if allowed and getattr(opts, f.name) not in allowed:
            raise ValueError(f"{f.name} must be {' or '.join(map(repr, allowed))}, got {getattr(opts, f.name)!r}")


@dataclass(frozen=True)
class OperatorOptions:
    """The Operator Manager: one per stage, fast local loop."""

    local_period_s: float = option(30.0, "seconds between two decisions of the stage's Operator Manager [000]")
    window_s: float = option(120.0, "the metrics window a decision reads, seconds")
    stabilization_s: float = option(60.0, "metrics this soon after a (re)start are ignored, seconds")
    min_window_fill: float = option(0.8, "decide only on a window at least this full (a share of `window_s`)")
    recent_s: float = option(20.0, (
        "mpc: the rows arriving over this last stretch of the window count as demand when they exceed the "
        "window's mean, seconds"))
    u_max: float = option(0.7, "EDF: migrate when the host's CPU utilization U_r is above this [000]")
    s_out: float = option(0.7, "EDF: scale out by one when the stage's busy fraction S is above this [000]")
    c: float = option(0.75, "EDF: scale in by one when sum(S)/(n−1) < c · s_out [000]")
    scale_in_threshold: float = option(25.0, "threshold3: scale in below this bottleneck score [001]")
    alarming_threshold: float = option(65.0, "threshold3: pre-stage above this bottleneck score [001]")
    scale_out_threshold: float = option(80.0, "threshold3: scale out above this bottleneck score [001]")
    release_hysteresis: float = option(10.0, "release what was pre-staged only below alarming_threshold − this")
    catch_up_s: float = option(60.0, "DS2: the backlog is to be drained within this many seconds")
    target_utilization: float = option(0.7, "DS2: size for this busy fraction per core")
    ds2_scale_in_margin: float = option(0.6, (
        "scale in to the cores that keep utilization ≤ this (absolute), a band below target_utilization"))
    forecast: bool = option(False, (
        "predictive input (docs/policies.md §4.1): demand = max(measured, forecast peak over the horizon)"))
    forecast_horizon_s: float = option(600.0, (
        "how far ahead the forecast is asked: a scale-out's restart + stabilization + window, seconds"))
    forecast_season_s: float = option(86400.0, (
        "the candidate season (a day), seconds; Holt-Winters from two seasons of history; 0: none"))
    forecast_season_learn: bool = option(True, (
        "use the season only once the history shows it (analyze.season); false: assume it"))
    forecast_max_skill: float = option(1.0, (
        "mpc plans without a forecast whose recent error is above this × the naive one's"))
    forecast_bucket_s: float = option(60.0, "the forecaster's time step: input rate averaged per bucket, seconds")
    scale_in_to: str = option("one", (
        "edf, threshold3: give cores back one per scale-in, as the papers do, or `ds2`: straight to DS2's n* "
        "at ds2_scale_in_margin whenever that is below n and the stage is not alarming"), choices=("one", "ds2"))
    # The receding-horizon controller (`mpc`, docs/policies.md §14.3). Its price follows the app's
    # error budget (plan/budget.py); the others are its model, not knobs to tune per app.
    slo_price: float | None = option(None, (
        "mpc: a fixed price, the core-seconds one second above the app's R_max is worth (each of its k stages "
        "prices its own with 1/k); unset: the price follows the burn rate of the app's error budget "
        "(slo_target), from 320"))
    mpc_horizon_s: float = option(600.0, "mpc: plan this far ahead (a restart, its catch-up, the forecast's reach)")
    mpc_step_s: float = option(60.0, "mpc: one step of the plan, seconds (the Application Manager's interval)")
    mpc_max_utilization: float = option(0.85, "mpc: above this busy fraction a stage's queueing alone eats R_max")
    mpc_rate_sd: float = option(0.10, "mpc: the demand's relative spread when the forecast gives less")

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
        bad_price = self.slo_price is not None and self.slo_price < 0
        if bad_price or not 0 < self.mpc_max_utilization <= 1 or self.mpc_rate_sd < 0:
            raise ValueError("expected slo_price >= 0, 0 < mpc_max_utilization <= 1 and mpc_rate_sd >= 0")
        if not 0 < self.recent_s <= self.window_s:
            raise ValueError(f"expected 0 < recent_s <= window_s, got {self.recent_s} / {self.window_s}")
        if self.mpc_step_s <= 0 or self.mpc_horizon_s < self.mpc_step_s:
            raise ValueError("expected mpc_step_s > 0 and mpc_horizon_s >= mpc_step_s")
        check_choices(self)

    @classmethod
    def from_params(cls, params: dict[str, Any] | None) -> OperatorOptions:
        return _from_params(cls, params)


@dataclass(frozen=True)
class AppOptions:
    """The Application Manager: one per app, slow loop (Airflow's re-plan)."""

    policy: str = option("token_bucket", "grant by the token bucket [000], or every request",
                         choices=("token_bucket", "accept_all"))
    control_interval_s: float = option(60.0, "seconds between two cycles of the Application Manager ([000] used 30)")
    capacity: float = option(1.0, "B [000]: the most tokens the bucket holds; below 1 it never grants")
    beta: float = option(0.75, "β [000]: tokens are added once the app's response time is above β · R_max")
    generator: str = option("edf_step", (
        "tokens added per interval: one above β · R_max (edf_step), or in proportion from β · R_max to R_max"),
        choices=("edf_step", "proportional"))
    urgent_needs_growth: bool = option(True, (
        "a request is urgent when the response time is above R_max and the backlog grows (false: the first alone)"))
    core_hour_cost: float = option(0.0, (
        "what holding a core costs, in gain units per core-hour (0: cores are free, as in [000]); a scale-out's "
        "gain is net of holding its cores until the maintenance window after next, a scale-in's adds what it saves"))
    scale_down_delay_s: float = option(3600.0, (
        "a scale-in is granted once asked for this long, seconds (Flink: scale-down.interval; §7.1)"))
    reversal_interval_s: float = option(900.0, (
        "a change reversing one granted less than this ago is declined (not a draining stage's scale-out), seconds"))
    drain_backlog_s: float = option(10.0, "more than this many seconds of input queued: draining, no scale-in")

    def __post_init__(self) -> None:
        if min(self.scale_down_delay_s, self.reversal_interval_s, self.drain_backlog_s) < 0:
            raise ValueError("expected scale_down_delay_s, reversal_interval_s and drain_backlog_s >= 0")
        if not 0 < self.beta <= 1:
            raise ValueError(f"expected 0 < beta <= 1, got {self.beta}")
        if self.capacity < 0:  # below 1 is legal: a bucket that never grants (recommend-only in effect)
            raise ValueError(f"expected capacity >= 0 tokens, got {self.capacity}")
        if self.core_hour_cost < 0:
            raise ValueError(f"expected core_hour_cost >= 0, got {self.core_hour_cost}")
        check_choices(self)

    @classmethod
    def from_params(cls, params: dict[str, Any] | None) -> AppOptions:
        return _from_params(cls, params)


def _coerce(default: Any, value: Any) -> Any:
    if default is None:  # an optional number (unset by default): slo_price
        return None if value is None else float(value)
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
    params = by_key(cls, json.loads(key))
    base = cls()
    return replace(base, **{k: _coerce(getattr(base, k), v) for k, v in params.items()})
