"""Server-side SVG for the Airflow page: no chart library and no CDN in the browser, and an
image with a real size that the page can be checked against. Pure: points in, markup out."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from html import escape

_OK, _LATE, _BOUND = "#2b6cb0", "#c53030", "#718096"
CLIP = 3.0  # the sparkline's scale ends at this many R_max


def sparkline_svg(points: Sequence[tuple[datetime, float]], r_max_ms: float, now: datetime,
                  span_s: float = 3600, width: int = 260, height: int = 56) -> str:
    """The response time per minute over the last `span_s` against R_max (dashed): a line,
    with the minutes above R_max as red dots. The scale stops at CLIP × R_max, so one minute of
    an old backlog (hours of latency) does not flatten the rest; a minute beyond it is drawn at
    the top edge (its dot's title says the real figure). An empty series draws the bound."""
    pad = 4
    top = min(max([r_max_ms * 1.25, *(v for _, v in points)]), CLIP * r_max_ms)

    def x(t: datetime) -> float:
        ago = min(span_s, max(0.0, (now - t).total_seconds()))
        return pad + (width - 2 * pad) * (1 - ago / span_s)

    def y(v: float) -> float:
        return height - pad - (height - 2 * pad) * (min(v, top) / top)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="response time, last hour">',
             f'<rect width="{width}" height="{height}" fill="#f7fafc"/>',
             f'<line x1="{pad}" x2="{width - pad}" y1="{y(r_max_ms):.1f}" y2="{y(r_max_ms):.1f}" '
             f'stroke="{_BOUND}" stroke-dasharray="3 3"><title>R_max {r_max_ms:,.0f} ms</title></line>']
    if not points:
        parts.append(f'<text x="{width / 2}" y="{height / 2 + 4}" font-size="11" font-family="sans-serif" '
                     f'text-anchor="middle" fill="{_BOUND}">no input in the last hour</text>')
    else:
        line = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points)
        parts.append(f'<polyline points="{line}" fill="none" stroke="{_OK}" stroke-width="1.5"/>')
        for t, v in points:
            if v > r_max_ms:
                parts.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="2.2" fill="{_LATE}">'
                             f'<title>{escape(f"{t:%H:%M} {v:,.0f} ms")}</title></circle>')
    parts.append("</svg>")
    return "".join(parts)
