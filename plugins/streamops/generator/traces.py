"""Rate traces: pure functions of elapsed seconds `t` -> rows/second (float >= 0).

Every built-in trace also knows its exact integral, so the writer can turn
"rows per second" into "rows in this tick" without numerical drift (a 0.5 rows/s
constant gives exactly one row every two ticks, a ramp's total equals its integral).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

RateFn = Callable[[float], float]

# Parameter "types": how a value is coerced and which range it must be in.
_RATE = "rate"  # float >= 0
_POSITIVE = "positive"  # float > 0 (durations that divide)
_NONNEG = "nonneg"  # float >= 0
_REAL = "real"  # any finite float (phase offsets)
_OPT_RATE = "optional_rate"  # None or float >= 0
_RATES = "rates"  # non-empty tuple of floats >= 0

_PARAMS: dict[str, dict[str, tuple[str, Any]]] = {
    "constant": {"rate": (_RATE, 100.0)},
    # The paper's source: 200 rows/s roughly doubling every 500 s.
    "ramp": {"start_rate": (_RATE, 200.0), "doubling_s": (_POSITIVE, 500.0), "max_rate": (_OPT_RATE, None)},
    "diurnal": {"base": (_RATE, 50.0), "peak": (_RATE, 500.0), "period_s": (_POSITIVE, 86400.0),
                "phase_s": (_REAL, 0.0)},
    "step": {"rates": (_RATES, (100.0, 200.0, 400.0)), "step_s": (_POSITIVE, 60.0)},
    "spike": {"base": (_RATE, 100.0), "spike_rate": (_RATE, 1000.0), "every_s": (_POSITIVE, 60.0),
              "duration_s": (_NONNEG, 5.0)},
}

TRACE_KINDS: tuple[str, ...] = tuple(_PARAMS)


# ---------------------------------------------------------------------------
# Parameter validation
# ---------------------------------------------------------------------------


def _to_float(kind: str, name: str, value: Any) -> float:
    if isinstance(value, bool):  # bool is an int subclass; True rows/s is a bug, not a rate
        raise ValueError(f"trace {kind!r}: param {name!r} must be a number, got {value!r}")
    try:
        x = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise ValueError(f"trace {kind!r}: param {name!r} must be a number, got {value!r}") from None
    if not math.isfinite(x):
        raise ValueError(f"trace {kind!r}: param {name!r} must be finite, got {value!r}")
    return x


def _split_rates(value: str) -> list[str]:
    # CLI strings use commas between params, so lists are "100/200/400", "100;200" or "[100,200]".
    text = value.strip().strip("[]()")
    return [p for p in re.split(r"[/;|,\s]+", text) if p]


def _coerce(kind: str, name: str, ptype: str, value: Any) -> Any:
    unset = value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null"))
    if ptype == _OPT_RATE and unset:
        return None
    if ptype == _RATES:
        items = _split_rates(value) if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not items:
            raise ValueError(f"trace {kind!r}: param {name!r} must be a non-empty list of rates, got {value!r}")
        rates = tuple(_to_float(kind, name, v) for v in items)
        if any(r < 0 for r in rates):
            raise ValueError(f"trace {kind!r}: param {name!r} rates must be >= 0, got {value!r}")
        return rates
    x = _to_float(kind, name, value)
    if ptype in (_RATE, _OPT_RATE, _NONNEG) and x < 0:
        raise ValueError(f"trace {kind!r}: param {name!r} must be >= 0, got {value!r}")
    if ptype == _POSITIVE and x <= 0:
        raise ValueError(f"trace {kind!r}: param {name!r} must be > 0, got {value!r}")
    return x


def _check_kind(kind: str) -> dict[str, tuple[str, Any]]:
    table = _PARAMS.get(kind)
    if table is None:
        raise ValueError(f"unknown trace kind {kind!r}; valid kinds: {', '.join(TRACE_KINDS)}")
    return table


def _normalize(kind: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Validate `params` for `kind` and fill in defaults, in the table's order."""
    table = _check_kind(kind)
    unknown = [k for k in params if k not in table]
    if unknown:
        raise ValueError(
            f"trace {kind!r}: unknown param {unknown[0]!r}; valid params for {kind!r}: {', '.join(table)}"
        )
    return {name: _coerce(kind, name, ptype, params.get(name, default)) for name, (ptype, default) in table.items()}


# ---------------------------------------------------------------------------
# Spec and parsing
# ---------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return "/".join(_fmt(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value)


@dataclass(frozen=True)
class TraceSpec:
    """A named trace kind plus its params (validated; missing params get defaults)."""

    kind: str
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        kind = self.kind.strip().lower()
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "params", _normalize(kind, dict(self.params)))

    def __hash__(self) -> int:  # params values are floats, tuples or None -> hashable
        return hash((self.kind, tuple(self.params.items())))

    def __str__(self) -> str:
        """Canonical CLI form; `parse_trace(str(spec)) == spec`."""
        return f"{self.kind}:" + ",".join(f"{k}={_fmt(v)}" for k, v in self.params.items())


def _split_params(text: str) -> list[str]:
    """Split on commas that are not inside [...] so "rates=[1,2,3],step_s=5" works."""
    parts: list[str] = []
    depth, cur = 0, list[str]()
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def parse_trace(text: str) -> TraceSpec:
    """Parse "kind" or "kind:name=value,name=value" (e.g. "ramp:start_rate=200,doubling_s=500").

    List params use "/" (or ";" or brackets): "step:rates=100/200/400,step_s=60".
    """
    kind, _, rest = text.strip().partition(":")
    kind = kind.strip().lower()
    table = _check_kind(kind)
    params: dict[str, str] = {}
    for item in _split_params(rest):
        name, eq, value = item.partition("=")
        name = name.strip()
        if not eq:
            raise ValueError(f"trace {kind!r}: expected name=value, got {item!r}; valid params: {', '.join(table)}")
        if name in params:
            raise ValueError(f"trace {kind!r}: param {name!r} given twice")
        params[name] = value.strip()
    return TraceSpec(kind, params)


# ---------------------------------------------------------------------------
# Trace objects
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Trace:
    """A callable rate trace that also knows its exact integral."""

    spec: TraceSpec
    rate: RateFn
    integral_fn: Callable[[float, float], float]

    def __call__(self, t: float) -> float:
        return self.rate(t)

    def integral(self, t0: float, t1: float) -> float:
        """Rows expected in [t0, t1)."""
        return self.integral_fn(t0, t1)


def _constant(rate: float) -> tuple[RateFn, Callable[[float, float], float]]:
    return (lambda t: rate), (lambda a, b: rate * (b - a))


def _ramp(start_rate: float, doubling_s: float,
          max_rate: float | None) -> tuple[RateFn, Callable[[float, float], float]]:
    k = math.log(2.0) / doubling_s
    # Time at which the exponential reaches the cap (inf: never, -inf: capped from the start).
    if max_rate is None or start_rate == 0:
        cap_t = math.inf
    elif max_rate == 0:
        cap_t = -math.inf
    else:
        cap_t = doubling_s * math.log2(max_rate / start_rate)

    def rate(t: float) -> float:
        return max_rate if t >= cap_t else start_rate * 2.0 ** (t / doubling_s)  # type: ignore[return-value]

    def integral(a: float, b: float) -> float:
        total = 0.0
        lo_end = min(b, cap_t)
        if lo_end > a:
            total += start_rate / k * (math.exp(k * lo_end) - math.exp(k * a))
        hi_start = max(a, cap_t)
        if b > hi_start:
            total += max_rate * (b - hi_start)  # type: ignore[operator]
        return total

    return rate, integral


def _diurnal(base: float, peak: float, period_s: float,
             phase_s: float) -> tuple[RateFn, Callable[[float, float], float]]:
    # rate = mid - amp*cos(w(t+phase)): base at t=-phase (night), peak half a period later.
    mid, amp, w = (base + peak) / 2.0, (peak - base) / 2.0, 2.0 * math.pi / period_s

    def rate(t: float) -> float:
        return mid - amp * math.cos(w * (t + phase_s))

    def integral(a: float, b: float) -> float:
        return mid * (b - a) - amp / w * (math.sin(w * (b + phase_s)) - math.sin(w * (a + phase_s)))

    return rate, integral


def _step(rates: tuple[float, ...], step_s: float) -> tuple[RateFn, Callable[[float, float], float]]:
    n = len(rates)
    prefix = [0.0]
    for r in rates[:-1]:
        prefix.append(prefix[-1] + r * step_s)  # rows up to the start of step j

    def rate(t: float) -> float:
        return rates[0] if t < 0 else rates[min(int(t // step_s), n - 1)]

    def cumulative(t: float) -> float:
        if t <= 0:
            return rates[0] * t
        j = min(int(t // step_s), n - 1)
        return prefix[j] + rates[j] * (t - j * step_s)

    return rate, (lambda a, b: cumulative(b) - cumulative(a))


def _spike(base: float, spike_rate: float, every_s: float,
           duration_s: float) -> tuple[RateFn, Callable[[float, float], float]]:
    on = min(duration_s, every_s)  # a spike longer than its period is just "always spiking"

    def rate(t: float) -> float:
        return spike_rate if (t % every_s) < on else base

    def spike_time(t: float) -> float:
        """Seconds spent spiking in [0, t) (negative for t < 0, so differences still work)."""
        return math.floor(t / every_s) * on + min(t % every_s, on)

    def integral(a: float, b: float) -> float:
        return base * (b - a) + (spike_rate - base) * (spike_time(b) - spike_time(a))

    return rate, integral


_BUILDERS: dict[str, Callable[..., tuple[RateFn, Callable[[float, float], float]]]] = {
    "constant": _constant,
    "ramp": _ramp,
    "diurnal": _diurnal,
    "step": _step,
    "spike": _spike,
}


def make_trace(spec: TraceSpec | str) -> Trace:
    """Build the rate function for a spec (or a CLI string, parsed with `parse_trace`)."""
    if isinstance(spec, str):
        spec = parse_trace(spec)
    rate, integral = _BUILDERS[spec.kind](**spec.params)
    return Trace(spec=spec, rate=rate, integral_fn=integral)


def integrate(trace: Callable[[float], float], t0: float, t1: float) -> float:
    """Rows expected in [t0, t1): exact for built-in traces, midpoint rule for plain callables."""
    if isinstance(trace, Trace):
        total = trace.integral(t0, t1)
    else:
        steps = 64  # plain callables are assumed smooth-ish; 64 midpoints per tick is plenty
        h = (t1 - t0) / steps
        total = sum(float(trace(t0 + (j + 0.5) * h)) for j in range(steps)) * h
    if not math.isfinite(total) or total < -1e-9:
        raise ValueError(f"trace gave an invalid row count {total!r} over [{t0}, {t1}); rates must be finite and >= 0")
    return max(0.0, total)
