"""A suite of seeded trace families for the simulator, split into training and test seeds.

Each family is a function `(seed) -> SimTrace` built from a per-second numpy array of rows/s:
`rows(t)` is exactly the array's value for second t (`rate(t)` holds it over the second). The
sim's day is compressed to DAY_S = 7200 s (night at t = 0, 2 h, …), and every trace's `meta`
carries `day_s`, `family`, `seed` and the events it contains (flash crowds, outages, bursts …).

Noise: "10 % noise" is multiplicative, 1 + N(0, 0.1) drawn every NOISE_KNOT_S seconds and
linearly interpolated in between. Drawn per second it would make `traces.change_points` see a
"step change" every few seconds; this way only the family's real steps (flash crowds, outages,
drifts, bursts) count as steps for the convergence figure.

SPLIT. Tune on TRAIN_SEEDS only, report on TEST_SEEDS only (bench/suite.py). A family's seed
draws its parameters (levels, phase, event times), so a test seed is load the tuning never saw.
HELD_OUT families (`issue15_day`, the issue's motivating day) are never used for tuning at all.

    from streamops.sim.suite import suite_trace, FAMILIES, TRAIN_SEEDS, TEST_SEEDS
    tr = suite_trace("flash_crowd", 101)        # or load_trace("suite:flash_crowd:101")
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from streamops.paths import REPO_ROOT
from streamops.sim.traces import SimTrace, load_csv_trace

DAY_S = 7200  # the sim's compressed day (as the `diurnal` built-in trace)
TRAIN_SEEDS: tuple[int, ...] = (1, 2, 3)  # tuning may look at these only
TEST_SEEDS: tuple[int, ...] = (101, 102, 103)  # reported, never used to choose
NOISE = 0.10
NOISE_KNOT_S = 30
REAL_EXPORT_CSV = REPO_ROOT / "bench" / "traces" / "real_run_stage_metrics.csv"
REAL_TRIM_S = 120  # the real run's first 2 minutes: an empty first batch and the start-up catch-up

FAMILIES: dict[str, str] = {
    "diurnal_noise": "compressed diurnal days, base 25–60 and peak 200–320 rows/s, random phase; 10 % noise; 2 days",
    "flash_crowd": "diurnal (base 30–60, peak 150–220 rows/s) with four 2–5× flash crowds of 5–15 min; 10 % noise; "
                   "2 days",
    "outage": "diurnal with four upstream outages (rate 0 for 1–5 min), the missed rows arriving on top of "
              "the normal rate over the next 2–7 min; 10 % noise; 2 days",
    "step_drift": "levels of 40–320 rows/s held 15–40 min, stepping up or down by 1.3–2×; 10 % noise; 2 days",
    "weekly_growth": "diurnal (base 25–45, peak 170–230 rows/s) growing 5–15 % per compressed day; 10 % noise; 3 days",
    "pareto_bursts": "flat 60–120 rows/s with bursts every ~20 min: height ∝ Pareto(α = 1.3) (capped at 7× base), "
                     "duration 30 s × Pareto(α = 1.5) (≤ 15 min); 10 % noise; 2 days",
    "real_export": f"the real run {REAL_EXPORT_CSV.relative_to(REPO_ROOT)} normalized to its mean, mirrored-tiled and "
                   "stretched 2–6× in time, random offset, mean level 80–160 rows/s; 2 days",
    "issue15_day": "issue 15's unseen day: 40–260 rows/s diurnal, a 3× flash crowd for 10 min, a 2-min upstream "
                   "outage with its backlog burst, 10 % noise; 1 day (held out: never used for tuning)",
}
HELD_OUT: tuple[str, ...] = ("issue15_day",)
TRAIN_FAMILIES: tuple[str, ...] = tuple(f for f in FAMILIES if f not in HELD_OUT)


class MissingTraceFile(FileNotFoundError):
    """A family's input file (the real run's export) is not there."""


class ArrayTrace:
    """rows/s per second from an array: rate(t) = r[floor(t)] (held over the second, clamped to
    the array's ends); integral(a, b) is exact for that step function, so rows(t) = r[t]."""

    def __init__(self, rates: np.ndarray):
        r = np.asarray(rates, dtype=float)
        if r.ndim != 1 or not len(r) or not np.all(np.isfinite(r)):
            raise ValueError("an array trace needs a non-empty 1-D array of finite rates")
        self.r = np.maximum(r, 0.0)
        self.cum = np.concatenate(([0.0], np.cumsum(self.r)))

    def __len__(self) -> int:
        return len(self.r)

    def __call__(self, t: float) -> float:
        return float(self.r[min(len(self.r) - 1, max(0, int(math.floor(t))))])

    def _cum(self, t: float) -> float:
        n = len(self.r)
        if t <= 0:
            return float(t * self.r[0])
        if t >= n:
            return float(self.cum[n] + (t - n) * self.r[-1])
        i = int(math.floor(t))
        return float(self.cum[i] + (t - i) * self.r[i])

    def integral(self, a: float, b: float) -> float:
        return float(self._cum(b) - self._cum(a))


def _rng(family: str, seed: int) -> np.random.Generator:
    """Independent streams per (family, seed): the same seed draws different things per family."""
    return np.random.default_rng([int(seed), zlib.crc32(family.encode())])


def _noise(rng: np.random.Generator, n: int, sd: float = NOISE, knot_s: int = NOISE_KNOT_S) -> np.ndarray:
    k = n // knot_s + 2
    knots = np.clip(1.0 + sd * rng.standard_normal(k), 1.0 - 4 * sd, 1.0 + 4 * sd)
    return np.interp(np.arange(n), np.arange(k) * knot_s, knots)


def _diurnal(n: int, base: float, peak: float, phase_s: float = 0.0, day_s: int = DAY_S) -> np.ndarray:
    """base at the trough (t = phase_s + k·day), peak half a day later."""
    t = np.arange(n, dtype=float)
    return base + (peak - base) * 0.5 * (1.0 - np.cos(2.0 * np.pi * (t - phase_s) / day_s))


def _slots(rng: np.random.Generator, n: int, count: int, length: Callable[[], int], gap: int,
           margin: int = 600) -> list[tuple[int, int]]:
    """`count` non-overlapping [start, end) intervals in [margin, n − margin) at least `gap` apart."""
    out: list[tuple[int, int]] = []
    for _ in range(200 * count):
        if len(out) == count:
            break
        d = int(length())
        s = int(rng.integers(margin, max(margin + 1, n - margin - d)))
        if all(s + d + gap <= a or b + gap <= s for a, b in out):
            out.append((s, s + d))
    return sorted(out)


def _trace(family: str, seed: int, rates: np.ndarray, **meta: Any) -> SimTrace:
    fn = ArrayTrace(rates)
    return SimTrace(name=f"suite:{family}:{seed}", rate_fn=fn, integral_fn=fn.integral,
                    default_duration_s=float(len(fn)), description=FAMILIES[family],
                    meta={"family": family, "seed": int(seed), "day_s": DAY_S, **meta})


def _outages(rng: np.random.Generator, r: np.ndarray, slots: list[tuple[int, int]],
             catchup: Callable[[int], int]) -> list[dict[str, Any]]:
    """Zero the rate over each slot and add its missed rows evenly over the catch-up that follows."""
    events = []
    for s, e in slots:
        missed = float(r[s:e].sum())
        d = int(catchup(e - s))
        r[s:e] = 0.0
        r[e:e + d] += missed / d
        events.append({"start": s, "end": e, "catchup_end": min(len(r), e + d), "missed_rows": round(missed, 1)})
    return events


# ------------------------------------------------------------------------------------ families
def diurnal_noise(seed: int) -> SimTrace:
    g, n = _rng("diurnal_noise", seed), 2 * DAY_S
    base, peak, phase = g.uniform(25, 60), g.uniform(200, 320), g.uniform(0, DAY_S)
    r = _diurnal(n, base, peak, phase) * _noise(g, n)
    return _trace("diurnal_noise", seed, r, base=round(base, 1), peak=round(peak, 1), phase_s=round(phase))


def flash_crowd(seed: int) -> SimTrace:
    g, n = _rng("flash_crowd", seed), 2 * DAY_S
    base, peak, phase = g.uniform(30, 60), g.uniform(150, 220), g.uniform(0, DAY_S)
    under = _diurnal(n, base, peak, phase) * _noise(g, n)
    r = under.copy()
    events = []
    for s, e in _slots(g, n, 4, lambda: int(g.integers(300, 901)), gap=1800):
        m = float(g.uniform(2.0, 5.0))
        r[s:e] *= m
        events.append({"start": s, "end": e, "multiplier": round(m, 2)})
    return _trace("flash_crowd", seed, r, base=round(base, 1), peak=round(peak, 1), phase_s=round(phase),
                  events=events)


def outage(seed: int) -> SimTrace:
    g, n = _rng("outage", seed), 2 * DAY_S
    base, peak, phase = g.uniform(30, 60), g.uniform(180, 280), g.uniform(0, DAY_S)
    r = _diurnal(n, base, peak, phase) * _noise(g, n)
    slots = _slots(g, n, 4, lambda: int(g.integers(60, 301)), gap=900)
    events = _outages(g, r, slots, lambda d: min(420, max(120, int(d * g.uniform(1.0, 2.0)))))
    return _trace("outage", seed, r, base=round(base, 1), peak=round(peak, 1), phase_s=round(phase), events=events)


def step_drift(seed: int) -> SimTrace:
    g, n = _rng("step_drift", seed), 2 * DAY_S
    level, t, r, levels = float(g.uniform(80, 180)), 0, np.empty(n), []
    while t < n:
        hold = int(g.integers(900, 2401))
        r[t:t + hold] = level
        levels.append({"start": t, "level": round(level, 1)})
        t += hold
        f = float(g.uniform(1.3, 2.0))
        up = level * f <= 320 and (level / f < 40 or g.random() < 0.5)
        level = level * f if up else level / f
    r *= _noise(g, n)
    return _trace("step_drift", seed, r, levels=levels)


def weekly_growth(seed: int) -> SimTrace:
    g, days = _rng("weekly_growth", seed), 3
    n = days * DAY_S
    base, peak, growth = g.uniform(25, 45), g.uniform(170, 230), g.uniform(0.05, 0.15)
    r = _diurnal(n, base, peak) * (1.0 + growth) ** (np.arange(n) / DAY_S) * _noise(g, n)
    return _trace("weekly_growth", seed, r, base=round(base, 1), peak=round(peak, 1),
                  growth_per_day=round(growth, 4), days=days)


def pareto_bursts(seed: int) -> SimTrace:
    g, n = _rng("pareto_bursts", seed), 2 * DAY_S
    base = float(g.uniform(60, 120))
    r = np.full(n, base)
    t, events = int(g.exponential(1200)), []
    while t < n:
        height = min(6.0, 0.5 * (1.0 + g.pareto(1.3)))  # extra rate, in multiples of the base
        dur = int(min(900, 30 * (1.0 + g.pareto(1.5))))
        r[t:t + dur] += height * base
        events.append({"start": t, "end": min(n, t + dur), "height": round(height, 3)})
        t += dur + int(g.exponential(1200))
    r *= _noise(g, n)
    return _trace("pareto_bursts", seed, r, base=round(base, 1), events=events)


def real_shape(path: str | Path | None = None) -> np.ndarray:
    """The real run's per-second input rate (start-up trimmed, 15-s moving average) over its mean."""
    p = Path(path) if path is not None else REAL_EXPORT_CSV
    if not p.exists():
        raise MissingTraceFile(f"the real_export family needs {p} (a stage_metrics export with columns "
                               "ts,stage_id,input_rows,input_rps,…); it is missing")
    tr = load_csv_trace(p)
    n = int(tr.default_duration_s)
    x = np.array([tr.rate(t) for t in range(n)])
    if n > 4 * REAL_TRIM_S:
        x = x[REAL_TRIM_S:]
    if len(x) >= 15:
        x = np.convolve(np.pad(x, 7, mode="edge"), np.ones(15) / 15, mode="valid")
    mean = float(x.mean())
    if not np.isfinite(mean) or mean <= 0:
        raise ValueError(f"{p}: the export has no positive input rate to replay")
    return x / mean


def real_export(seed: int, path: str | Path | None = None) -> SimTrace:
    shape = real_shape(path)
    g, n = _rng("real_export", seed), 2 * DAY_S
    stretch, level = float(g.uniform(2.0, 6.0)), float(g.uniform(80, 160))
    period = 2 * len(shape)  # mirrored tiling (forward, backward, …) is continuous at the joins
    offset = float(g.uniform(0, period))
    pos = (np.arange(n) / stretch + offset) % period
    idx = np.where(pos < len(shape), pos, period - pos - 1e-9)
    r = level * np.interp(idx, np.arange(len(shape)), shape)
    return _trace("real_export", seed, r, stretch=round(stretch, 3), level=round(level, 1),
                  offset_s=round(offset, 1), source=str(path or REAL_EXPORT_CSV))


def issue15_day(seed: int) -> SimTrace:
    g, n = _rng("issue15_day", seed), DAY_S
    r = _diurnal(n, 40.0, 260.0) * _noise(g, n)
    s = int(g.uniform(1800, 3000))
    r[s:s + 600] *= 3.0
    o = int(g.uniform(4500, 5700))
    events = [{"kind": "flash_crowd", "start": s, "end": s + 600, "multiplier": 3.0}]
    events += [{"kind": "outage", **e} for e in _outages(g, r, [(o, o + 120)], lambda d: 180)]
    return _trace("issue15_day", seed, r, base=40.0, peak=260.0, events=events)


_BUILDERS: dict[str, Callable[[int], SimTrace]] = {
    "diurnal_noise": diurnal_noise, "flash_crowd": flash_crowd, "outage": outage, "step_drift": step_drift,
    "weekly_growth": weekly_growth, "pareto_bursts": pareto_bursts, "real_export": real_export,
    "issue15_day": issue15_day,
}
assert set(_BUILDERS) == set(FAMILIES)


def suite_trace(family: str, seed: int) -> SimTrace:
    """The `family` trace for `seed` (MissingTraceFile for real_export without its CSV)."""
    try:
        build = _BUILDERS[family]
    except KeyError:
        raise ValueError(f"unknown trace family {family!r}; families: {', '.join(FAMILIES)}") from None
    return build(int(seed))


def load_suite_trace(text: str) -> SimTrace:
    """`suite:FAMILY:SEED` (or `suite:FAMILY`, seed 1), as `trace_loader.load_trace` accepts it."""
    parts = text.strip().split(":")
    if len(parts) not in (2, 3) or parts[0] != "suite":
        raise ValueError(f"a suite trace is suite:FAMILY:SEED, got {text!r}")
    try:
        seed = int(parts[2]) if len(parts) == 3 else 1
    except ValueError:
        raise ValueError(f"{text!r}: the seed must be an integer") from None
    return suite_trace(parts[1], seed)
