"""How the control plane hands a driver its parts without the driver importing it: the Operator
Manager is named in the run's row and resolved in the driver. Pure: no database, no Spark."""

from __future__ import annotations

import pytest

from spark_apps.run_stage import operator_manager_for
from streamops import control
from streamops.run_spec import RunSpec
from tests.unit.test_run_spec import _spec


def test_a_run_whose_row_asks_for_the_operator_manager_gets_the_control_plane_s():
    assert operator_manager_for(_spec(operator_manager=True)) is control.request_for_stage


def test_a_run_without_one_makes_no_requests():
    assert operator_manager_for(_spec(operator_manager=False)) is None


def test_a_row_written_when_the_operator_manager_was_named_still_reads_and_a_wrong_name_is_refused():
    stored = _spec().model_dump(mode="json")
    assert RunSpec.of({**stored, "operator_manager": "streamops.control:request_for_stage"}).operator_manager
    assert not RunSpec.of({**stored, "operator_manager": None}).operator_manager
    with pytest.raises(ValueError):
        RunSpec.of({**stored, "operator_manager": "streamops.control:no_such_function"})


def test_a_database_away_at_start_up_delays_marking_the_run_running_instead_of_failing_the_start(monkeypatch):
    """The soak's PostgreSQL SIGSTOP met a recovery's new driver at `mark_running`: its connection
    timed out, the driver exited, and the start cost one of the stage's three restarts. The
    driver's start-up writes now ride out a database that is away, as its sink's writes do."""
    import psycopg2

    from spark_apps import run_stage
    from streamops.store import ledger

    calls = []

    def write(name, **params):
        calls.append(name)
        if len(calls) < 3:  # what libpq raises when the server does not answer in connect_timeout
            raise psycopg2.OperationalError('connection to server at "127.0.0.1" failed: timeout expired')
    monkeypatch.setattr(ledger.db, "write", write)
    run_stage.mark_running(7, "app-1", 123, "host", None)
    assert calls == ["deployment_running"] * 3
