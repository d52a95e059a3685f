"""The `streamops status` table, fitted to the terminal.

Rich squeezes every column of a table that is too wide until each cell reads "st…". This view
measures its cells instead and leaves out the least important columns until the rest fits,
and it says which ones it left out. `--wide` keeps them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from streamops.plan.budget import STALE_AFTER_S, windows


@dataclass(frozen=True)
class Column:
    header: str
    justify: Literal["left", "right"]
    keep: int          # lower is kept longer when the terminal is narrow
    explain: str = ""  # for the caption


# In the order an operator reads them; `keep` ranks what stays on a narrow terminal: what runs
# and how fast (stage, state, cores, p95), whether it keeps up (in/s, backlog, beat), what is
# wrong or coming (fail 24h, plan, quar.), then where (pool, out/s), then the rest.
COLUMNS = [
    Column("stage", "left", 0),
    Column("state", "left", 0),
    Column("cores", "right", 1, "cores: the run's cores"),
    Column("parts", "right", 4, "parts: state partitions (key groups: the most cores it can use)"),
    Column("p95 ms", "right", 1, "p95 ms: latency of the latest batch with input in the last minute (idle: none)"),
    Column("in/s", "right", 2, "in/s, out/s: rows per second over the last minute"),
    Column("backlog", "right", 2, "backlog: input files not yet read (q N: the quarantine query's, when behind); "
                                  "N rec: a Kafka stage's lag"),
    Column("beat", "right", 3, "beat: heartbeat age"),
    Column("fail 24h", "right", 3, "fail 24h: failures handled in the last day"),
    Column("plan", "left", 4, "plan: granted or deferred reconfiguration"),
    Column("quar.", "right", 4, "quar.: quarantined lines, last 24 h"),
    Column("pool", "left", 5, "pool: where the run is"),
    Column("out/s", "right", 5),
    Column("replicas", "left", 6, "replicas: live/wanted, and the one that leads (least input left)"),
    Column("batch", "right", 7, "batch: latest batch id"),
    Column("ckpt", "right", 7, "ckpt: the checkpoint's size on disk, as the supervisor last measured it (each "
                               "minute; docs/jobs.md says what bounds it)"),
    Column("spark ui", "left", 8, "spark ui: the live run's Spark UI, on loopback of the driver's host"),
]
# A column with nothing to tell (every stage has one replica) goes first.
_ONLY_DEFAULT = {"replicas": "1"}
_COLORS = {"running": "green", "starting": "yellow", "stopping": "yellow", "failed": "red", "refused": "red"}


def _fmt(v: Any, spec: str = "", none: str = "–") -> str:
    return none if v is None else format(v, spec)


def human_bytes(n: int | None) -> str:
    """A size as a person reads it, in powers of 1000: 756 kB, 2.9 MB, 728 MB, 1.2 GB; "–" unknown."""
    if n is None:
        return "–"
    size, unit = float(n), "B"
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 999.5 or unit == "TB":
            break
        size /= 1000
    return f"{size:.0f} {unit}" if unit == "B" or size >= 9.95 else f"{size:.1f} {unit}"


def _backlog(r: Any) -> str:
    """The main query's backlog, and the quarantine query's when it is further behind: a stage
    whose side query lags has lines not yet checked, and `status` must not say 0 then."""
    main, side = r.backlog_files, getattr(r, "quarantine_backlog_files", None)
    if main is None and getattr(r, "backlog_rows", None) is not None:  # a Kafka stage: its lag in records
        return f"{r.backlog_rows} rec"
    if side is not None and side > (main or 0):
        return f"{_fmt(main)} (q {side})"
    return _fmt(main)


def cells(r: Any) -> tuple[dict[str, str], list[str]]:
    """One stage_status row → its cells (rich markup) and the notes it earns under the table."""
    notes = []
    hb = r.heartbeat_age_s
    beat = "–" if hb is None else f"{hb:.0f}s"
    if hb is not None and r.status == "running" and hb > 15:
        beat = f"[red]{beat}[/]"
    state = f"[{_COLORS.get(r.status, 'dim')}]{r.status}[/]"
    if r.health == "failed":  # the watchdog gave up: say so louder than the last run's state
        state = "[bold red]FAILED[/]"
        reason = r.health_reason or "repeated failures"
        # a reason that names its own way on (data lost) needs no generic advice
        notes.append(f"[bold red]{r.stage_id}[/]: the watchdog gave up ({reason})"
                     + ("" if "streamops start" in reason else "; redeploy it"))
    if r.poison_24h:
        notes.append(f"[yellow]{r.stage_id}[/]: {r.poison_24h}")
    if r.input_24h:
        notes.append(f"[yellow]{r.stage_id}[/]: input {r.input_24h} (table input_anomalies)")
    if getattr(r, "last_change", None):  # why its cores last moved: a policy's reason names its signal
        notes.append(escape(f"{r.stage_id}: last change {r.last_change}: {r.last_change_reason}"))
    return {
        "stage": r.stage_id, "state": state, "pool": r.pool or "–", "cores": _fmt(r.cores), "parts": _fmt(r.partitions),
        "in/s": _fmt(r.in_rps, ",.0f"), "out/s": _fmt(r.out_rps, ",.0f"),
        "p95 ms": _fmt(r.latency_p95_ms, ",.0f", none="idle" if r.status == "running" else "–"),
        "backlog": _backlog(r), "batch": _fmt(r.batch_id), "beat": beat, "quar.": str(r.quarantined),
        "fail 24h": str(r.failures_24h), "plan": r.plan or "", "replicas": _replicas(r),
        "spark ui": _link(getattr(r, "ui_url", None)), "ckpt": human_bytes(getattr(r, "checkpoint_bytes", None)),
    }, notes


def _link(url: str | None) -> str:
    """The URL, a hyperlink where the terminal supports them; "–" with no live UI."""
    return f"[link={url}]{url}[/link]" if url else "–"


def _replicas(r: Any) -> str:
    wanted, live = getattr(r, "replicas", 1) or 1, getattr(r, "live_replicas", 0) or 0
    if wanted <= 1 and live <= 1:
        return "1"
    text = f"{live}/{wanted}" + (f" lead {r.leader}" if r.leader else "")
    return f"[yellow]{text}[/]" if live < wanted else text


def _width(columns: list[Column], rows: list[dict[str, str]]) -> int:
    # Rich's default box: one border per column plus one, and one space of padding each side.
    widths = [max([len(c.header)] + [Text.from_markup(row[c.header]).cell_len for row in rows]) for c in columns]
    return sum(widths) + 3 * len(columns) + 1


def fit(rows: list[dict[str, str]], width: int) -> tuple[list[Column], list[Column]]:
    """(shown, hidden) columns: drop the least important until the table fits `width`."""
    shown = list(COLUMNS)

    def rank(c: Column) -> int:
        dull = c.header in _ONLY_DEFAULT and all(row[c.header] == _ONLY_DEFAULT[c.header] for row in rows)
        return 99 if dull else c.keep

    while _width(shown, rows) > width and len(shown) > 2:
        drop = max(range(len(shown)), key=lambda i: (rank(shown[i]), i))
        shown.pop(drop)
    return shown, [c for c in COLUMNS if c not in shown]


def _caption(explain: list[str], notes: list[str], width: int | None) -> Text:
    # The CLI's console soft-wraps (long lines are never cut), so wrap the caption here.
    caption = Text("\n").join([Text(" · ").join(Text(e) for e in explain), *(Text.from_markup(n) for n in notes)])
    if not width:
        return caption
    return Text("\n").join(caption.wrap(Console(width=width), width))


def status_table(rows: Iterable[Any], width: int | None, now: datetime | None = None) -> Table:
    """The table for `rows` (stage_status), fitted to `width` columns (None: every column)."""
    built = [cells(r) for r in rows]
    data = [c for c, _ in built]
    shown, hidden = fit(data, width) if width else (list(COLUMNS), [])
    explain = [c.explain for c in shown if c.explain]
    if hidden:
        explain.append(f"hidden to fit {width} columns: {', '.join(c.header for c in hidden)} (--wide shows them)")
    notes = [n for _, ns in built for n in ns]
    t = Table(title=f"streamops stages · {(now or datetime.now()):%H:%M:%S}", header_style="bold",
              caption=_caption(explain, notes, width), caption_justify="left")
    if width is None:  # --wide: its natural width, never squeezed into "…" (print it with crop=False)
        t.width = _width(shown, data)
    for c in shown:
        t.add_column(c.header, justify=c.justify, no_wrap=c.header in ("stage", "state"))
    for row in data:
        t.add_row(*[row[c.header] for c in shown])
    return t


# -- the apps: each one's SLO error budget (slo_budgets, as the last re-plan stored it) ----------
APP_COLUMNS = [
    Column("app", "left", 0),
    Column("R_max", "right", 0),
    Column("SLO", "right", 0, "SLO: the share of seconds within R_max the app aims at (slo_target)"),
    Column("budget left", "right", 0, "budget left: of today's (UTC) seconds above R_max the SLO allows, and how "
                                      "many are spent"),
    Column("burn", "right", 0, "burn: seconds above R_max over the share the SLO allows, in the short / long window "
                               "(5 min / 1 h of a day; at 1 the budget lasts the day)"),
    Column("price", "right", 0, "price: core-seconds mpc puts on a second above R_max (plan/budget.py)"),
    Column("why", "left", 0),
]
_DAY = windows(86400.0, 60.0)  # a day's burn windows at the default control interval
DEFAULT_WINDOWS = (_DAY.short_s, _DAY.long_s)


def _window(s: float) -> str:
    return f"{s / 3600:g} h" if s >= 3600 and s % 3600 == 0 else f"{s / 60:g} min" if s % 60 == 0 else f"{s:g} s"


def app_cells(r: Any, default_slo: float) -> dict[str, str]:
    """One status_apps row → its cells: the budget left, the two burn rates, the price and why."""
    slo = r.slo_target if r.slo_target is not None else default_slo
    row = {"app": r.app, "R_max": f"{r.r_max_ms:,} ms", "SLO": f"{100 * slo:g} %"}
    if r.budget_s is None:  # no re-plan has measured it yet
        return {**row, "budget left": "–", "burn": "–", "price": "–", "why": "not measured yet (the re-plan does)"}
    left = f"{r.left_ratio:.0%} ({r.spent_s:,.0f}/{r.budget_s:,.0f} s)"
    burn = f"{r.short_burn:.2g} / {r.long_burn:.2g}"
    if (r.short_s, r.long_s) != DEFAULT_WINDOWS:  # a long control interval stretches the short one
        burn += f" ({_window(r.short_s)} / {_window(r.long_s)})"
    why = escape(r.rule)
    if r.budget_age_s is not None and r.budget_age_s > STALE_AFTER_S:
        why += f" [yellow]as of {r.budget_age_s / 60:.0f} min ago[/]"
    return {**row, "budget left": f"[red]{left}[/]" if r.left_ratio <= 0 else left,
            "burn": f"[red]{burn}[/]" if r.short_burn > 1 and r.long_burn > 1 else burn,
            "price": f"{r.price:,.0f} core-s", "why": why}


def apps_table(rows: Iterable[Any], width: int | None, default_slo: float) -> Table | None:
    """Each app's error budget (status_apps rows); None without apps. `width` None: --wide."""
    data = [app_cells(r, default_slo) for r in rows]
    if not data:
        return None
    explain = [c.explain for c in APP_COLUMNS if c.explain]
    t = Table(title="apps: SLO error budget today (UTC)", header_style="bold",
              caption=_caption(explain, [], width), caption_justify="left")
    if width is None:
        t.width = _width(APP_COLUMNS, data)
    for c in APP_COLUMNS:
        t.add_column(c.header, justify=c.justify, no_wrap=c.header != "why")
    for row in data:
        t.add_row(*[row[c.header] for c in APP_COLUMNS])
    return t
