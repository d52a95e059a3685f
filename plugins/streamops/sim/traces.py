"""Arrival-rate traces for the simulator: rows/s into the app's first stage, as a function of
simulated seconds.

`trace_from_text` reads the built-in, generator and CSV forms that `trace_loader.load_trace`
accepts (its docstring lists them); the trace suite (`suite.py`) builds on SimTrace and
`load_csv_trace` here.
"""

from __future__ import annotations

import bisect
import csv
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from streamops.generator.traces import TRACE_KINDS, make_trace
from streamops.generator.traces import Trace as GenTrace

# name → (generator spec, default duration in simulated seconds, description[, time shift s])
# The diurnal "day" is compressed to 2 h (7200 s) of simulated time; the trough (night) is at
# t = 0, 7200, 14400 …, the peak at 3600, 10800 … EDF-like units: peak 300 rows/s per stage.
BUILTIN: dict[str, tuple[Any, ...]] = {
    "diurnal": ("diurnal:base=30,peak=300,period_s=7200,phase_s=0", 14_400.0,
                "EDF-like taxi day compressed to 2 h: 30 rows/s at night, 300 rows/s at the peak; 2 days"),
    "ramp": ("ramp:start_rate=200,doubling_s=500,max_rate=800", 3_000.0,
             "[001] ramp: 200 rows/s doubling every 500 s, capped at 800 rows/s"),
    "steps": ("step:rates=100/250/400/150,step_s=1200", 4_800.0,
              "steps 100 → 250 → 400 → 150 rows/s, 20 min each"),
    "spikes": ("spike:base=100,spike_rate=400,every_s=1200,duration_s=240", 4_800.0,
               "100 rows/s with a 4-minute spike to 400 rows/s every 20 min, the first at 10 min", 600.0),
}


@dataclass
class SimTrace:
    """A rate trace: `rate(t)` rows/s, `rows(t)` rows arriving in [t, t+1)."""

    name: str
    rate_fn: Callable[[float], float]
    default_duration_s: float
    integral_fn: Callable[[float, float], float] | None = None
    description: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def rate(self, t: float) -> float:
        return max(0.0, float(self.rate_fn(t)))

    def rows(self, t: float) -> float:
        """Expected rows in [t, t+1): exact for generator traces, trapezoid otherwise."""
        if self.integral_fn is not None:
            return max(0.0, self.integral_fn(t, t + 1.0))
        return 0.5 * (self.rate(t) + self.rate(t + 1.0))


def _from_generator(name: str, spec: str, duration: float, description: str = "", shift_s: float = 0.0) -> SimTrace:
    """`shift_s` plays the generator's trace from that second on (rate(t) = trace(t + shift_s))."""
    tr: GenTrace = make_trace(spec)
    if shift_s:
        return SimTrace(name=name, rate_fn=lambda t: tr.rate(t + shift_s),
                        integral_fn=lambda a, b: tr.integral(a + shift_s, b + shift_s), default_duration_s=duration,
                        description=description or str(tr.spec), meta={"spec": str(tr.spec), "shift_s": shift_s})
    return SimTrace(name=name, rate_fn=tr.rate, integral_fn=tr.integral, default_duration_s=duration,
                    description=description or str(tr.spec), meta={"spec": str(tr.spec)})


def _default_duration(spec: str) -> float:
    kind = spec.partition(":")[0].strip().lower()
    tr = make_trace(spec)
    p = tr.spec.params
    if kind == "step":
        rates: list[float] = p["rates"]
        step_s: float = p["step_s"]
        return len(rates) * step_s
    if kind == "spike":
        every_s: float = p["every_s"]
        return 4 * every_s
    if kind == "diurnal":
        period_s: float = p["period_s"]
        return 2 * period_s
    if kind == "ramp":
        return 3_000.0
    return 3_600.0


class PiecewiseLinear:
    """Linear interpolation over (t, rate) points; constant outside them."""

    def __init__(self, ts: list[float], rates: list[float]):
        if not ts:
            raise ValueError("a CSV trace needs at least one row")
        pts = sorted(zip(ts, rates, strict=True))
        self.ts = [p[0] for p in pts]
        self.rs = [max(0.0, p[1]) for p in pts]

    def __call__(self, t: float) -> float:
        ts, rs = self.ts, self.rs
        if t <= ts[0]:
            return rs[0]
        if t >= ts[-1]:
            return rs[-1]
        i = bisect.bisect_right(ts, t)
        t0, t1, r0, r1 = ts[i - 1], ts[i], rs[i - 1], rs[i]
        return r0 if t1 == t0 else r0 + (r1 - r0) * (t - t0) / (t1 - t0)


def _parse_ts(value: str) -> float:
    v = value.strip()
    try:
        return float(v)
    except ValueError:
        pass
    dt = datetime.fromisoformat(v.replace("Z", "+00:00").replace(" ", "T", 1))
    return dt.timestamp()


def load_csv_trace(path: str | Path) -> SimTrace:
    text = str(path)
    stage = None
    if "#" in text and not Path(text).exists():
        text, _, stage = text.rpartition("#")
    p = Path(text)
    with p.open(newline="") as f:
        reader = csv.DictReader(f)
        cols = [c.strip() for c in (reader.fieldnames or [])]
        rows = [{(k or "").strip(): (v or "").strip() for k, v in r.items()} for r in reader]
    if "t_s" in cols and "rate" in cols:
        ts = [float(r["t_s"]) for r in rows if r["t_s"] and r["rate"]]
        rs = [float(r["rate"]) for r in rows if r["t_s"] and r["rate"]]
        fn = PiecewiseLinear(ts, rs)
        return SimTrace(name=p.name, rate_fn=fn, default_duration_s=max(1.0, math.ceil(max(ts) - min(0.0, min(ts)))),
                        description=f"CSV t_s,rate ({len(ts)} points)", meta={"path": str(p), "format": "t_s,rate"})
    if "ts" in cols and ("input_rps" in cols or "input_rows" in cols):
        if "stage_id" in cols:
            stage = stage or next((r["stage_id"] for r in rows if r.get("stage_id")), None)
            rows = [r for r in rows if r.get("stage_id") == stage]
        use_rps = "input_rps" in cols and any(r.get("input_rps") for r in rows)
        key = "input_rps" if use_rps else "input_rows"
        pts = sorted((_parse_ts(r["ts"]), float(r[key])) for r in rows if r.get("ts") and r.get(key))
        if not pts:
            raise ValueError(f"{p}: no usable rows for stage {stage!r}")
        t0 = pts[0][0]
        ts = [t - t0 for t, _ in pts]
        if use_rps:
            rs = [v for _, v in pts]
        else:
            rs = []
            for i, (t, v) in enumerate(pts):
                gap = (pts[i + 1][0] - t) if i + 1 < len(pts) else (t - pts[i - 1][0] if i > 0 else 1.0)
                rs.append(v / gap if gap > 0 else 0.0)
        fn = PiecewiseLinear(ts, rs)
        return SimTrace(name=p.name, rate_fn=fn, default_duration_s=max(1.0, math.ceil(ts[-1]) + 1),
                        description=f"stage_metrics replay ({key}, {len(ts)} batches"
                                    f"{', stage ' + stage if stage else ''})",
                        meta={"path": str(p), "format": f"stage_metrics:{key}", "stage_id": stage})
    raise ValueError(f"{p}: a CSV trace needs columns t_s,rate or ts,input_rps or ts,input_rows; got {cols}")


def trace_from_text(text: str) -> SimTrace:
    """A built-in name, a generator spec or a CSV path (the forms of `trace_loader.load_trace` but the suite's)."""
    if text in BUILTIN:
        spec, duration, desc, *shift = BUILTIN[text]
        return _from_generator(text, spec, duration, desc, shift[0] if shift else 0.0)
    kind = text.partition(":")[0].strip().lower()
    if kind in TRACE_KINDS and not Path(text).exists():
        return _from_generator(text, text, _default_duration(text))
    path = text.rpartition("#")[0] if "#" in text and not Path(text).exists() else text
    if Path(path).exists():
        return load_csv_trace(text)
    raise ValueError(f"unknown trace {text!r}: use one of {sorted(BUILTIN)}, suite:FAMILY:SEED, a generator spec "
                     f"({', '.join(TRACE_KINDS)}) or a CSV path")


def change_points(tr: SimTrace, duration_s: int, rel: float = 0.2,
                  min_abs: float = 5.0) -> list[tuple[int, float, float]]:
    """Step changes: seconds t where the per-second rate jumps by more than `rel` of the
    previous rate (and by `min_abs` rows/s at least). Returns (t, rate_before, rate_after)."""
    out: list[tuple[int, float, float]] = []
    prev = tr.rows(0)
    for t in range(1, int(duration_s)):
        cur = tr.rows(t)
        if abs(cur - prev) > max(min_abs, rel * max(prev, 1e-9)):
            if out and t - out[-1][0] <= 2:  # an interpolated jump spread over two seconds
                t0, before, _ = out[-1]
                out[-1] = (t0, before, cur)
            else:
                out.append((t, prev, cur))
        prev = cur
    return out
