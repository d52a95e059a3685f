"""The chart of a calibration (sim/calibrate.py): measured vs simulated response and backlog over
the calibrated range, the replayed outages shaded, cores and input below."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def _broken(points: list[tuple[float, float]], gap: float) -> np.ndarray:
    """(t, v) points as an array, with a NaN row where they are more than `gap` s apart (no line
    across an outage: nothing was measured there)."""
    out: list[list[float]] = []
    for p in points:
        if out and p[0] - out[-1][0] > gap:
            out.append([out[-1][0], np.nan])
        out.append([p[0], p[1]])
    return np.array(out, dtype=float) if out else np.zeros((0, 2))


def plot_calibration(res: dict[str, Any], path: Path) -> Path:
    """Measured vs simulated: response per window (top), backlog (middle), cores and input (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = res["series"]
    fig, (a1, a2, a3) = plt.subplots(3, 1, figsize=(11, 8), sharex=True, height_ratios=[3, 2, 1.3])
    for key, style, label in (("measured_response", dict(color="tab:blue", marker="o", ms=3, lw=0.8), "measured"),
                              ("simulated_response", dict(color="tab:orange", marker=".", ms=3, lw=0.8), "simulated")):
        pts = _broken(s[key], 3.0 + res["calibrated"]["trigger_interval_s"])
        a1.plot(pts[:, 0], pts[:, 1] / 1000.0, label=f"{label} (batch p95 per 1 s window)", **style)
    c = res["comparison"]
    a1.set_ylabel("response time (s)")
    a1.set_title(f"{res['stage_id']}: measured vs simulated — p95 response {c['response_p95_ms']['measured']:.0f} vs "
                 f"{c['response_p95_ms']['simulated']:.0f} ms, availability {c['availability']['measured']:.2%} vs "
                 f"{c['availability']['simulated']:.2%}", fontsize=10)
    a1.legend(loc="upper right", fontsize=8)
    mb, sb = _broken(s["measured_backlog"], 5.0), _broken(s["simulated_backlog_at_batches"], 5.0)
    a2.plot(mb[:, 0], mb[:, 1], "o-", color="tab:blue", ms=3, lw=0.8, label="measured (at batch ends)")
    a2.plot(sb[:, 0], sb[:, 1], ".-", color="tab:orange", ms=3, lw=0.8, label="simulated (at the same times)")
    a2.plot(np.arange(len(s["simulated_backlog"])), s["simulated_backlog"], color="tab:orange", lw=0.5, alpha=0.5,
            label="simulated, per second")
    a2.set_ylabel("backlog (rows)")
    a2.legend(loc="upper right", fontsize=8)
    a3.step(np.arange(len(s["cores"])), s["cores"], where="post", color="tab:green", label="cores")
    for sc in res["scripted"]:  # the outages, as replayed
        for ax in (a1, a2, a3):
            ax.axvspan(sc["down_start_s"], sc["down_start_s"] + sc["downtime_s"], color="0.85", zorder=0)
    a3.set_ylabel("cores")
    a3.set_xlabel("seconds since the start of the calibrated range")
    a4 = a3.twinx()
    a4.plot(np.arange(len(s["input_rows"])), s["input_rows"], color="0.5", lw=0.8)
    a4.set_ylabel("input rows/s", color="0.5")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
