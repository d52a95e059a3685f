"""The Pareto chart of a trace (issue 29): the clairvoyant frontier (sim/bound.py) and each
configuration's run as a point, core-hours across, seconds above R_max up (symlog: 0 s fits)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from streamops.sim.bound import Frontier


@dataclass(frozen=True)
class Panel:
    title: str
    frontier: Frontier
    points: dict[str, tuple[float, float]] = field(default_factory=dict)  # config → (core-hours, s above)


def plot_frontiers(panels: list[Panel], path: Path, title: str) -> Path:
    """One panel per trace, side by side; the same marker per configuration across panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({n for p in panels for n in p.points})
    markers = "osD^vP*Xh<>p"
    colors = plt.get_cmap("tab10")
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.4), squeeze=False)
    for ax, p in zip(axes[0], panels, strict=True):
        c = [q.core_hours for q in p.frontier.points]
        v = [q.seconds_above for q in p.frontier.points]
        ax.fill_between(c + [c[-1] * 1.6], v + [v[-1]], 0, color="0.9", step=None, label="_nothing")
        ax.plot(c, v, "-", color="black", lw=1.6, label="clairvoyant frontier")
        for i, n in enumerate(names):
            if n in p.points:
                x, y = p.points[n]
                ax.plot(x, y, markers[i % len(markers)], color=colors(i % 10), ms=7, label=n, ls="none")
        ax.set_yscale("symlog", linthresh=10)
        ax.set_xlim(0.9 * min(c), 1.05 * max([*(x for x, _ in p.points.values()), min(c) * 3]))
        ax.set_ylim(0, max([*v, *(y for _, y in p.points.values())]) * 1.5)
        ax.set_xlabel("core-hours")
        ax.set_ylabel("seconds above R_max")
        ax.set_title(p.title, fontsize=10)
        ax.grid(True, alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)), fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
