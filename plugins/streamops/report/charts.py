"""The report's charts: PNG bytes from matplotlib's object API (Agg canvas, no pyplot and no
global backend state, so it is safe inside Airflow workers and tests)."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import matplotlib.dates as mdates
from matplotlib.figure import Figure

# Colours by reconfiguration action; anything else is grey.
ACTION_COLOURS = {"scale_out": "#2a7ab0", "scale_in": "#7a4fb0", "migrate": "#c77c0e"}
FAILURE_COLOUR = "#d62728"
CLIP_ABOVE = 1.5  # a peak this far above the axis's 98th-percentile top is clipped and annotated
LOG_SCALE_ABOVE = 20  # response peaks beyond 20 × R_max switch the chart to a log scale
# A matplotlib Axes over a time axis: its stubs type x values as floats, where its date unit
# converter takes the datetimes given here.
DateAxes = Any


@dataclass(frozen=True)
class Marker:
    """A reconfiguration on the chart: when its new run produced output, what it did. The
    label is short (its number in the report's table): the table says the rest."""

    at: datetime
    action: str
    label: str


@dataclass(frozen=True)
class Span:
    """An output gap (a failure) shaded on the chart."""

    start: datetime
    end: datetime
    label: str


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def _scale_response_axis(top: DateAxes, ts: list[datetime], resp: list[float], worst: list[float], r_max_ms: float,
                         beta: float) -> None:
    """The response axis's scale: logarithmic past LOG_SCALE_ABOVE × R_max, else linear up to the
    98th percentile with a higher peak clipped and said."""
    finite = [v for v in resp + worst if not math.isnan(v)]
    peak = max([r_max_ms * 1.25, *finite])
    if peak > LOG_SCALE_ABOVE * r_max_ms:
        # a catch-up of minutes would flatten R_max and everything near it to the axis
        top.set_yscale("log")
        top.set_ylim(min([beta * r_max_ms, *(v for v in finite if v > 0)]) / 2, peak * 2)
        top.set_ylabel("response time (ms, log)")
        return
    # A cold start's first batches (tens of seconds once) would stretch the axis until the
    # steady response reads as a flat band: the axis ends at the 98th percentile, and what
    # lies above is clipped and said.
    ordered = sorted(finite)
    typical = ordered[int(0.98 * (len(ordered) - 1))] if ordered else 0.0
    top_ms = max(r_max_ms * 1.25, typical) * 1.1
    if peak > top_ms * CLIP_ABOVE:
        at = ts[max(range(len(resp)), key=lambda i: max(-1.0 if math.isnan(v) else v for v in (resp[i], worst[i])))]
        top.set_ylim(0, top_ms)
        top.annotate(f"↑ clipped: peak {peak:,.0f} ms at {at:%H:%M} UTC", (0.99, 0.97), xycoords="axes fraction",
                     ha="right", va="top", fontsize=8, color="#555555")
    else:
        top.set_ylim(0, peak * 1.05)
    top.set_ylabel("response time (ms)")


def _plot_response(top: DateAxes, ts: list[datetime], response_ms: list[float | None], worst_ms: list[float | None],
                   r_max_ms: float, beta: float) -> None:
    """Response time and each bucket's worst batch against R_max and β·R_max."""
    nan = float("nan")
    resp = [nan if v is None else v for v in response_ms]
    worst = [nan if v is None else v for v in worst_ms]
    top.plot(ts, worst, color="#9ecae1", linewidth=0.6, label="worst batch per stage")
    top.plot(ts, resp, color="#08519c", linewidth=1.0, label="response time (Σ stages, batch p95)")
    top.axhline(r_max_ms, color=FAILURE_COLOUR, linestyle="--", linewidth=1.2, label=f"R_max = {r_max_ms:,.0f} ms")
    top.axhline(beta * r_max_ms, color="#ff7f0e", linestyle=":", linewidth=1.2,
                label=f"β·R_max = {beta * r_max_ms:,.0f} ms (β = {beta:g})")
    _scale_response_axis(top, ts, resp, worst, r_max_ms, beta)


def _plot_cores(bottom: DateAxes, ts: list[datetime], cores: list[int | None]) -> None:
    bottom.step(ts, [float("nan") if c is None else c for c in cores], where="post", color="#238b45", linewidth=1.4)
    bottom.set_ylabel("cores")
    bottom.set_ylim(0, max([1, *(c for c in cores if c is not None)]) + 1)
    bottom.yaxis.get_major_locator().set_params(integer=True)


def _mark_changes(top: DateAxes, bottom: DateAxes, markers: list[Marker], spans: list[Span]) -> None:
    """Reconfigurations as vertical lines through both axes, failures as shaded gaps, and their
    labels above the plot."""
    for ax in (top, bottom):
        for m in markers:
            ax.axvline(m.at, color=ACTION_COLOURS.get(m.action, "grey"), linestyle="-.", linewidth=1.1)
        for s in spans:
            # a line as well: a gap of seconds is invisible as a span on a day's axis
            ax.axvline(s.start, color=FAILURE_COLOUR, linestyle=":", linewidth=1.1)
            ax.axvspan(s.start, s.end, color=FAILURE_COLOUR, alpha=0.2, linewidth=0)
        ax.grid(True, alpha=0.3)
    # Labels go above the plot, never over the curve: a number per reconfiguration (the report's
    # table has the same numbers) and F1, F2 … per failure; alternate heights keep close ones apart.
    for i, (label, at, colour) in enumerate(
            [(m.label, m.at, ACTION_COLOURS.get(m.action, "grey")) for m in markers]
            + [(f"F{k + 1}", s.start, FAILURE_COLOUR) for k, s in enumerate(spans)]):
        top.annotate(label, (mdates.date2num(at), 1.0), xycoords=("data", "axes fraction"),
                     xytext=(0, 2 + 9 * (i % 2)), textcoords="offset points", ha="center", va="bottom",
                     fontsize=8, fontweight="bold", color=colour, annotation_clip=False)


def response_chart(app: str, ts: list[datetime], response_ms: list[float | None], worst_ms: list[float | None],
                   cores: list[int | None], r_max_ms: float, beta: float, markers: list[Marker], spans: list[Span],
                   title: str) -> bytes:
    """EDF's Fig. 4 for one app and day: response time against R_max and β·R_max above, the cores
    (replicas) below, on one time axis; reconfigurations as vertical lines through both, failures
    as shaded gaps. `None` in `response_ms` (a bucket missing a stage) breaks the line."""
    fig = Figure(figsize=(11, 5.2), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1.3])
    _plot_response(top, ts, response_ms, worst_ms, r_max_ms, beta)
    # pad: the reconfiguration and failure labels above the plot stay clear of the title
    top.set_title(title, loc="left", fontsize=11, pad=24)
    _plot_cores(bottom, ts, cores)
    _mark_changes(top, bottom, markers, spans)
    handles, labels = top.get_legend_handles_labels()
    # Below the chart: inside it, a legend covers the latest data, where a reader looks first.
    fig.legend(handles, labels, loc="outside lower center", ncols=4, fontsize=8, frameon=False)
    bottom.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz="UTC"))
    bottom.set_xlabel("time of day (UTC)")
    return _png(fig)


def downtime_chart(apps: list[str], reconfig_s: list[float], failure_s: list[float], title: str) -> bytes:
    """Per app, the downtime caused by reconfigurations next to the downtime caused by failures."""
    fig = Figure(figsize=(11, 0.9 + 0.55 * max(len(apps), 1)), layout="constrained")
    ax = fig.subplots()
    y = list(range(len(apps)))
    h = 0.38
    ax.barh([i - h / 2 for i in y], reconfig_s, height=h, color=ACTION_COLOURS["scale_out"], label="reconfigurations")
    ax.barh([i + h / 2 for i in y], failure_s, height=h, color=FAILURE_COLOUR, label="failures")
    for i, (r, f) in enumerate(zip(reconfig_s, failure_s, strict=True)):
        for value, y0 in ((r, i - h / 2), (f, i + h / 2)):
            if value > 0:  # a bar of nothing needs no "0.0 s"
                ax.annotate(f"{value:,.1f} s", (value, y0), xytext=(3, 0), textcoords="offset points", va="center",
                            fontsize=8)
        if r == f == 0:
            ax.annotate("no downtime", (0, i), xytext=(3, 0), textcoords="offset points", va="center", fontsize=8,
                        color="#555555")
    ax.set_yticks(y, apps)
    ax.invert_yaxis()
    ax.set_xlabel("downtime (s)")
    ax.set_xlim(0, max([1.0, *reconfig_s, *failure_s]) * 1.15)
    ax.set_title(title, loc="left", fontsize=11)
    fig.legend(loc="outside lower center", ncols=2, fontsize=8, frameon=False)  # never over a bar or its label
    ax.grid(True, axis="x", alpha=0.3)
    return _png(fig)


@dataclass(frozen=True)
class HaStage:
    """One stage in the high-availability chart: its failures per cause with their MTTR p50 (a text:
    several kinds may give a range), and the share of violated windows with and without redundancy
    (None: no such window that day)."""

    stage: str
    failures_real: int
    failures_injected: int
    mttr_real: str
    mttr_injected: str
    share_with: float | None
    share_without: float | None


CAUSE_COLOURS = {"real": FAILURE_COLOUR, "injected": "#9467bd"}
REDUNDANCY_COLOURS = {"with": "#238b45", "without": "#7f7f7f"}


def ha_chart(stages: list[HaStage], title: str) -> bytes:
    """Per stage, left: failures by cause (real, injected) with MTTR p50 beside each bar; right: the
    share of violated 1-second windows with redundancy (≥ 2 live runs) next to the share without."""
    fig = Figure(figsize=(11, 1.3 + 0.6 * max(len(stages), 1)), layout="constrained")
    left, right = fig.subplots(1, 2, sharey=True)
    y = list(range(len(stages)))
    h = 0.38
    real = [s.failures_real for s in stages]
    inj = [s.failures_injected for s in stages]
    left.barh([i - h / 2 for i in y], real, height=h, color=CAUSE_COLOURS["real"], label="real failures")
    left.barh([i + h / 2 for i in y], inj, height=h, color=CAUSE_COLOURS["injected"], label="injected failures")
    for i, s in enumerate(stages):
        for n, mttr, y0 in ((s.failures_real, s.mttr_real, i - h / 2),
                            (s.failures_injected, s.mttr_injected, i + h / 2)):
            if n:
                left.annotate(f"{n} · MTTR p50 {mttr}", (n, y0), xytext=(3, 0), textcoords="offset points",
                              va="center", fontsize=8)
        if not (s.failures_real or s.failures_injected):
            left.annotate("no failures", (0, i), xytext=(3, 0), textcoords="offset points", va="center", fontsize=8,
                          color="#555555")
    left.set_xlim(0, max([1, *real, *inj]) * 1.6)  # room for the MTTR labels
    left.xaxis.get_major_locator().set_params(integer=True)
    left.set_xlabel("failures")
    left.set_yticks(y, [s.stage for s in stages])
    left.invert_yaxis()
    nan = float("nan")
    with_ = [nan if s.share_with is None else 100 * s.share_with for s in stages]
    without = [nan if s.share_without is None else 100 * s.share_without for s in stages]
    right.barh([i - h / 2 for i in y], with_, height=h, color=REDUNDANCY_COLOURS["with"],
               label="violated windows, with redundancy")
    right.barh([i + h / 2 for i in y], without, height=h, color=REDUNDANCY_COLOURS["without"],
               label="violated windows, without redundancy")
    for i, s in enumerate(stages):
        for share, y0 in ((s.share_with, i - h / 2), (s.share_without, i + h / 2)):
            text = "no windows" if share is None else f"{100 * share:.3g} %"
            right.annotate(text, (0 if share is None else 100 * share, y0), xytext=(3, 0), textcoords="offset points",
                           va="center", fontsize=8, color="#555555" if share is None else "black")
    shares = [v for v in with_ + without if not math.isnan(v)]
    right.set_xlim(0, max([0.1, *shares]) * 1.35)
    right.set_xlabel("violated 1-second windows (% of the class's observed windows)")
    for ax in (left, right):
        ax.grid(True, axis="x", alpha=0.3)
    fig.suptitle(title, x=0.01, ha="left", fontsize=11)
    fig.legend(loc="outside lower center", ncols=4, fontsize=8, frameon=False)
    return _png(fig)
