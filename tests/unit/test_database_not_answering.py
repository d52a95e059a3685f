"""Observability while PostgreSQL is in trouble (issue 48 item 9), without a database: a read
past its deadline, `status` and `deploy` against a closed port (one line, exit 1, no
traceback), the watch loop's frame surviving an error, and the page's JSON answering 503. The
same against a locked table on real PostgreSQL: tests/integration/test_database_not_answering.py."""

from __future__ import annotations

import asyncio
import io
import threading
import time

import pytest
from sqlalchemy.exc import OperationalError
from typer.testing import CliRunner

from streamops import cli
from streamops.cli import status as cli_status
from streamops.store import db, observe

CLOSED_PORT_URL = "postgresql://nobody@127.0.0.1:1/none"  # nothing listens on port 1


@pytest.fixture
def closed_port(monkeypatch):
    monkeypatch.setenv("STREAMOPS_DATABASE_URL", CLOSED_PORT_URL)
    db.engine.cache_clear()
    yield
    db.engine.cache_clear()


def _refused() -> OperationalError:
    import psycopg2

    return OperationalError("SELECT 1", {}, psycopg2.OperationalError(
        'connection to server at "127.0.0.1", port 1 failed: Connection refused\n\tIs the server running?'))


def test_a_read_past_its_deadline_raises_not_answering(monkeypatch):
    release = threading.Event()
    t0 = time.monotonic()
    with pytest.raises(observe.NotAnswering, match="no answer within 0.3 s"):
        observe.within(lambda: release.wait(30), deadline_s=0.3)
    release.set()
    assert time.monotonic() - t0 < 2
    assert observe.within(lambda: 42, deadline_s=1) == 42
    with pytest.raises(ZeroDivisionError):  # the read's own error, as it is
        observe.within(lambda: 1 / 0, deadline_s=1)


def test_observability_connections_are_read_only_with_short_timeouts(monkeypatch):
    monkeypatch.delenv(observe.TIMEOUT_ENV, raising=False)
    args = observe.connect_args()
    assert args["connect_timeout"] == 3
    assert "statement_timeout=3000" in args["options"] and "default_transaction_read_only=on" in args["options"]


@pytest.mark.parametrize("argv", [["status"], ["deploy", "taxi", "--no-check", "--upgrade", "none"]])
def test_a_closed_port_is_one_line_and_exit_1(closed_port, argv):
    res = CliRunner().invoke(cli.app, argv)
    assert isinstance(res.exception, SystemExit) and res.exit_code == 1, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert "Traceback" not in res.output
    assert lines[-1].startswith("error: database not answering: ") and "port 1 failed" in lines[-1]
    assert len([line for line in lines if line.startswith("error:")]) == 1


def test_the_watch_frame_survives_a_database_that_does_not_answer(monkeypatch):
    from rich.console import Console
    from rich.table import Table

    def render(frame) -> str:
        c = Console(width=200, record=True, file=io.StringIO())
        c.print(frame)
        return c.export_text()

    good = Table("stage", "state", "cores", title="streamops stages")
    state = cli.WatchState()
    monkeypatch.setattr(cli_status, "status_frame", lambda wide: good)
    assert cli.watch_frame(state, wide=False) is good
    monkeypatch.setattr(cli_status, "status_frame", lambda wide: (_ for _ in ()).throw(_refused()))
    first = render(cli.watch_frame(state, wide=False))
    since = state.down_since
    assert f"database not answering since {since:%H:%M:%S}" in first and "Connection refused" in first
    assert "streamops stages" in first, "the last table stays on screen above the line"
    release = threading.Event()
    monkeypatch.setenv(observe.TIMEOUT_ENV, "0.3")
    monkeypatch.setattr(cli_status, "status_frame", lambda wide: release.wait(30))  # a stalled server
    t0 = time.monotonic()
    stalled = render(cli.watch_frame(state, wide=False))
    release.set()
    assert time.monotonic() - t0 < 2 and f"since {since:%H:%M:%S}" in stalled
    monkeypatch.setattr(cli_status, "status_frame", lambda wide: good)
    assert cli.watch_frame(state, wide=False) is good and state.down_since is None


def test_the_pages_json_is_503_with_the_reason_when_the_database_hangs(monkeypatch):
    from fastapi import HTTPException

    from streamops.ui import app, views

    release = threading.Event()
    monkeypatch.setenv(observe.PAGE_TIMEOUT_ENV, "0.3")
    monkeypatch.setattr(views, "streams", lambda: release.wait(30))
    t0 = time.monotonic()
    with pytest.raises(HTTPException) as e:
        asyncio.run(app._streams(None))
    release.set()
    assert time.monotonic() - t0 < 2
    assert e.value.status_code == 503 and "not answering" in e.value.detail and "0.3 s" in e.value.detail


def test_the_page_waits_for_a_slow_read_past_the_exporters_timeout(monkeypatch):
    """The page's deadline is its own (STREAMOPS_PAGE_TIMEOUT_S), not the exporter's: a read that a
    loaded machine makes slower than STREAMOPS_OBSERVE_TIMEOUT_S still shows its rows."""
    from streamops.ui import app, views

    monkeypatch.setenv(observe.TIMEOUT_ENV, "0.2")
    monkeypatch.setenv(observe.PAGE_TIMEOUT_ENV, "3")
    monkeypatch.setattr(views, "streams", lambda: time.sleep(0.6) or [])
    monkeypatch.setattr(app, "_runs", lambda request: asyncio.sleep(0, {}))
    assert asyncio.run(app._streams(None)) == []


def test_the_page_itself_is_a_503_that_reloads_when_the_database_hangs(monkeypatch):
    """In Airflow's frame the page's 503 is HTML with the reason and the page's 15 s reload, so the
    page comes back with the database by itself."""
    from streamops.ui import app, views

    release = threading.Event()
    monkeypatch.setenv(observe.PAGE_TIMEOUT_ENV, "0.3")
    monkeypatch.setattr(views, "streams", lambda: release.wait(30))

    async def viewer(request):
        return object()

    monkeypatch.setattr(app, "_reader", viewer)
    t0 = time.monotonic()
    res = asyncio.run(app.page(None))
    release.set()
    assert time.monotonic() - t0 < 2
    body = res.body.decode()
    assert res.status_code == 503 and res.media_type == "text/html"
    assert '<meta http-equiv="refresh" content="15">' in body and "no answer within 0.3 s" in body
