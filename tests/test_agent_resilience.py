"""A database that goes away delays reports; it never kills the stage."""

from __future__ import annotations

import socket
import time

from sqlalchemy import create_engine

from streamops.agent.agent import BufferedWriter
from streamops.agent.sinks import is_transient, retry_idempotent


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_writer_buffers_while_the_database_is_away_then_delivers(engine, clean_db):
    away = create_engine(f"postgresql+psycopg2://postgres@127.0.0.1:{_closed_port()}/streamops",
                         connect_args={"connect_timeout": 1})
    writer = BufferedWriter(away, "t.away")
    writer.start()
    for i in range(3):
        writer.submit("command_done", {"id": -i, "outcome": "x"})
    time.sleep(2)
    assert writer.is_alive() and len(writer.pending) == 3, "nothing is lost while the database is away"
    writer.engine = engine  # the database is back
    deadline = time.monotonic() + 20
    while writer.pending and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not writer.pending
    writer.close(2)


def test_only_transient_errors_are_retried():
    assert is_transient(RuntimeError('psycopg2.OperationalError: could not connect to server: Connection refused'))
    assert not is_transient(RuntimeError("ModuleNotFoundError: No module named 'streamops'"))
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("server closed the connection unexpectedly")

    retry_idempotent(flaky, "test write", budget_s=30)
    assert len(calls) == 3
