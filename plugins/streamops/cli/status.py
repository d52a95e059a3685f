"""`streamops status | report`: the stages' table (once, or watched through a database outage)
and the day's report."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import typer
from rich.console import Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from streamops.cli.common import console, fail, say

app = typer.Typer()


def status_table(wide: bool = False) -> Table:
    from streamops.status_view import status_table as view
    from streamops.store import observe

    return view(observe.rows("stage_status"), None if wide else console.width)


def apps_table(wide: bool = False) -> Table | None:
    """Each app's SLO error budget today, as the last re-plan stored it (None: no app)."""
    from streamops.registry import App
    from streamops.status_view import apps_table as view
    from streamops.store import observe

    return view(observe.rows("status_apps"), None if wide else console.width,
                float(App.model_fields["slo_target"].default))


def status_frame(wide: bool = False) -> RenderableType:
    """What `status` prints: the apps' error budgets above the stages' table."""
    apps, stages = apps_table(wide), status_table(wide)
    return stages if apps is None else Group(apps, stages)


class WatchState:
    """What `status --watch` keeps between refreshes: the last table, and since when the
    database has not answered (None while it does)."""

    def __init__(self) -> None:
        self.last: RenderableType | None = None
        self.down_since: datetime | None = None


def watch_frame(state: WatchState, wide: bool) -> RenderableType:
    """One refresh of `status --watch`: the tables, or, while the database does not answer, the
    last ones and a line saying since when. Never raises for the database: the loop outlives
    an outage (a stalled server too: the read has a deadline)."""
    from streamops.store import observe

    try:
        table = observe.within(lambda: status_frame(wide))
    except observe.NOT_ANSWERING as e:
        state.down_since = state.down_since or datetime.now()
        line = Text(f"database not answering since {state.down_since:%H:%M:%S}: {observe.reason(e)}", style="bold red")
        return Group(state.last, line) if state.last is not None else line
    state.last, state.down_since = table, None
    return table


@app.command()
def status(watch: bool = typer.Option(False, "--watch", "-w", help="refresh until Ctrl-C (not a terminal: a "
                                                                     "timestamped table every max(interval, 5) s)"),
           interval: float = typer.Option(2.0, help="seconds between refreshes with --watch"),
           wide: bool = typer.Option(False, "--wide", help="every column, even if the terminal is too narrow")) -> None:
    """A table per stage: run state, cores/partitions, p95 latency, rows/s in and out, backlog,
    heartbeat age, pool, plan, failures and quarantined lines (last 24 h), under one per app: its
    SLO error budget left today, the short/long burn rates and mpc's price of a second above R_max.
    On a narrow terminal the least important columns are left out (the caption says which);
    --wide keeps them all."""
    from streamops.store import observe

    try:
        if not watch:  # a database that does not answer: one line and exit 1 (_Commands)
            console.print(observe.within(lambda: status_frame(wide)), crop=not wide)  # --wide: no cell cut
            console.print(Text(_last_report_line()), soft_wrap=wide)
            return
        state = WatchState()
        if not console.is_terminal:  # piped (`make demo | tee`): Live would print nothing; a table per refresh
            while True:
                console.print(f"-- {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC", highlight=False)
                console.print(watch_frame(state, wide))
                console.file.flush()
                time.sleep(max(interval, 5.0))
        with Live(watch_frame(state, wide), console=console, refresh_per_second=4) as live:
            while True:
                time.sleep(interval)
                live.update(watch_frame(state, wide))
    except KeyboardInterrupt:
        pass


def _last_report_line() -> str:
    """Where the last report is: `reports/D/index.html (day D, generated …)`."""
    from streamops.paths import REPO_ROOT
    from streamops.report.nightly import last_report
    from streamops.store import observe

    r = observe.within(lambda: last_report(observe.engine()))
    if r is None:
        return "last report: none yet (`streamops report`, or the streamops_nightly_report DAG, writes one)"
    path = Path(r["path"])
    shown = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
    scope = f", app {r['app']}" if r["app"] else ""
    return f"last report: {shown} (day {r['day']}{scope}, generated {r['created_at']:%Y-%m-%d %H:%M %Z})"


@app.command()
def report(day: str | None = typer.Option(None, "--date", metavar="YYYY-MM-DD|today|yesterday",
                                             help="the day to report (UTC, the database's days); default: "
                                                  "yesterday, or today when yesterday has no data"),
           app_name: str | None = typer.Option(None, "--app", metavar="APP", help="one app; default: every app"),
           out: Path | None = typer.Option(None, "--out", metavar="DIR",
                                              help="reports root; default: reports/ "
                                                   "(or STREAMOPS_REPORTS_DIR)")) -> None:
    """Write the day's report: DIR/D/index.html (summary per app, SLO met, availability, downtime,
    charts of response time against R_max and cores, data quality) and a CSV per reporting view,
    and record it in the `reports` table."""
    from datetime import date, datetime, timedelta

    from streamops.report import nightly
    from streamops.store import db

    today = datetime.now(UTC).date()
    words = {"today": today, "yesterday": today - timedelta(days=1)}
    try:
        d = words.get(day.lower()) or date.fromisoformat(day) if day else None
    except ValueError:
        fail(f"--date must be YYYY-MM-DD, today or yesterday, got {day!r}", code=2)
    t0 = time.monotonic()
    try:
        if d is None:  # a first demo has no yesterday: an empty report would say nothing
            d = words["yesterday"]
            if not nightly.day_has_metrics(d):
                d = today
                say(f"yesterday ({words['yesterday']}) has no metrics: reporting today so far "
                     f"(--date yesterday forces it)")
        index = nightly.build_report(d, app=app_name, out_dir=out)
    except (db.DatabaseUnavailable, ValueError) as e:
        fail(str(e))
    say(f"report for {d} written in {time.monotonic() - t0:.1f} s: {index}")
