"""Bottleneck score O(x) in [0, 100] by fuzzy inference [001]: Mamdani rules over CPU, memory
and data size, triangular membership functions, centroid defuzzification.

Hand-written (about 60 lines, vectorized with numpy over many stages): the fuzzy libraries on
PyPI (scikit-fuzzy) evaluate one crisp input at a time, which is too slow for a 10 000-stage
cycle. The rule base is documented in docs/policies.md.
"""

from __future__ import annotations

import numpy as np

UNIVERSE = np.linspace(0.0, 100.0, 101)


def tri(x: np.ndarray, a: float, b: float, c: float) -> np.ndarray:
    """Triangular membership; a == b or b == c gives a shoulder."""
    x = np.asarray(x, dtype=float)
    left = np.where(b > a, (x - a) / (b - a if b > a else 1), (x >= b).astype(float))
    right = np.where(c > b, (c - x) / (c - b if c > b else 1), (x <= b).astype(float))
    return np.clip(np.minimum(left, right), 0.0, 1.0)


# Inputs, each scaled to 0..1 (data: load ratio / 2, so 0.5 = demand equals capacity).
IN_SETS = {
    "low": (0.0, 0.0, 0.5),
    "medium": (0.2, 0.5, 0.8),
    "high": (0.5, 1.0, 1.0),
}
OUT_SETS = {
    "low": (0.0, 0.0, 40.0),
    "medium": (20.0, 50.0, 80.0),
    "high": (60.0, 100.0, 100.0),
}
_OUT = {name: tri(UNIVERSE, *abc) for name, abc in OUT_SETS.items()}

# (cpu, memory, data) → output; None = any. Firing strength = min over the named inputs.
RULES: list[tuple[str | None, str | None, str | None, str]] = [
    ("high", None, None, "high"),       # saturated CPU is a bottleneck whatever the data
    (None, None, "high", "high"),       # demand above capacity (or backlog to catch up)
    (None, "high", None, "high"),       # memory pressure (state) ends in GC pauses or spills
    ("medium", None, "medium", "medium"),
    ("medium", "medium", None, "medium"),
    ("low", None, "medium", "medium"),   # spare CPU but rising demand: watch it
    ("low", "low", "low", "low"),
    ("medium", "low", "low", "low"),
]


def bottleneck_scores(cpu, mem, data) -> np.ndarray:
    """Vectorized O(x): arrays of cpu (0..1), mem (0..1), data = load ratio (0..2+) → scores."""
    cpu = np.clip(np.asarray(cpu, dtype=float), 0, 1)
    mem = np.clip(np.asarray(mem, dtype=float), 0, 1)
    data = np.clip(np.asarray(data, dtype=float) / 2.0, 0, 1)
    inputs = {"cpu": cpu, "mem": mem, "data": data}
    member = {(k, s): tri(v, *abc) for k, v in inputs.items() for s, abc in IN_SETS.items()}
    ones = np.ones_like(cpu)
    agg = np.zeros(cpu.shape + UNIVERSE.shape)
    for c, m, d, out in RULES:
        w = ones
        for key, s in (("cpu", c), ("mem", m), ("data", d)):
            if s is not None:
                w = np.minimum(w, member[(key, s)])
        agg = np.maximum(agg, np.minimum(w[..., None], _OUT[out]))  # clip the consequent, max-aggregate
    area = agg.sum(axis=-1)
    centroid = (agg * UNIVERSE).sum(axis=-1) / np.where(area > 0, area, 1)
    return np.where(area > 0, centroid, 0.0)


def bottleneck_score(cpu: float, mem: float, data: float) -> float:
    return float(bottleneck_scores([cpu], [mem], [data])[0])
