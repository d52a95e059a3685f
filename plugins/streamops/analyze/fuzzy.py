"""Bottleneck score O(x) in [0, 100] by fuzzy inference [001] over CPU, memory and data size,
with triangular membership functions and centroid defuzzification.

Design, chosen so that the score is monotone in every input and never has a gap:
- Each input has three triangular sets (low, medium, high with shoulders) that form a Ruspini
  partition: at every point the memberships sum to 1. Breakpoints are per input (INPUTS).
- The rule base is complete, 27 rules: IF cpu is A AND mem is B AND data is C THEN O is
  max(A, B, C) — the worst resource decides. AND is the product.
- Consequents are scaled by their firing strength and summed (Kosko's standard additive
  model), then defuzzified by the centroid. The three output sets have equal area, so the
  centroid is exactly sum(m_level × centroid_level): a weighted average that can only rise
  when an input rises, since raising an input moves firing mass to higher levels.

Hand-written and vectorized with numpy over many stages at once: the PyPI fuzzy libraries
evaluate one crisp input at a time, too slow for a 10 000-stage cycle.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

LEVELS = ("low", "medium", "high")

# (lo, mid, hi): low is 1 up to lo and 0 from mid; medium peaks at mid; high is 1 from hi.
INPUTS = {
    "cpu": (0.3, 0.6, 0.9),   # S, busy fraction per replica
    "mem": (0.5, 0.75, 0.95),  # memory utilization of the pool's hosts
    "data": (0.4, 0.7, 1.1),  # load ratio: (input rate + backlog catch-up) / capacity
}

# Output sets on [0, 100], all of area 20: low (0,0,40), medium (30,50,70), high (60,100,100).
OUT_SETS = {"low": (0.0, 0.0, 40.0), "medium": (30.0, 50.0, 70.0), "high": (60.0, 100.0, 100.0)}
OUT_CENTROID = np.array([(a + b + c) / 3.0 for a, b, c in OUT_SETS.values()])  # 13.3, 50, 86.7


def memberships(x: ArrayLike, lo: float, mid: float, hi: float) -> np.ndarray:
    """[..., 3] memberships in (low, medium, high); each row sums to 1."""
    x = np.asarray(x, dtype=float)
    rising = np.clip((x - lo) / (mid - lo), 0.0, 1.0)  # low → medium between lo and mid
    topping = np.clip((x - mid) / (hi - mid), 0.0, 1.0)  # medium → high between mid and hi
    return np.stack([1.0 - rising, rising - topping, topping], axis=-1)


def level_masses(cpu: ArrayLike, mem: ArrayLike, data: ArrayLike) -> np.ndarray:
    """[..., 3] total firing strength of the rules concluding low, medium, high."""
    # P(max level ≤ k) = product over inputs of the membership up to level k
    c_cpu, c_mem, c_data = (np.cumsum(memberships(x, *INPUTS[name]), axis=-1)
                            for name, x in (("cpu", cpu), ("mem", mem), ("data", data)))
    return np.diff(c_cpu * c_mem * c_data, prepend=0.0, axis=-1)


def bottleneck_scores(cpu: ArrayLike, mem: ArrayLike, data: ArrayLike) -> np.ndarray:
    """Vectorized O(x): arrays of cpu (0..1), mem (0..1), data (load ratio, 0..) → scores in [13.3, 86.7]."""
    scores: np.ndarray = level_masses(cpu, mem, data) @ OUT_CENTROID
    return scores


def bottleneck_score(cpu: float, mem: float, data: float) -> float:
    """One stage, in plain floats (numpy's per-call overhead dominates for a single point).
    Same arithmetic as `bottleneck_scores`."""
    cdf_low = cdf_mid = 1.0
    for name, x in (("cpu", cpu), ("mem", mem), ("data", data)):
        lo, mid, hi = INPUTS[name]
        rising = min(1.0, max(0.0, (x - lo) / (mid - lo)))
        topping = min(1.0, max(0.0, (x - mid) / (hi - mid)))
        cdf_low *= 1.0 - rising  # membership in low
        cdf_mid *= 1.0 - topping  # membership in low or medium
    c_low, c_mid, c_high = (float(c) for c in OUT_CENTROID)
    return cdf_low * c_low + (cdf_mid - cdf_low) * c_mid + (1.0 - cdf_mid) * c_high
