"""How the control plane hands a driver its parts without the driver importing it: the Operator
Manager is named in the run's row and resolved in the driver. Pure: no database, no Spark."""

from __future__ import annotations

import pytest

from spark_apps.run_stage import resolve_operator_manager
from streamops import control
from streamops.execute import stages


def test_the_operator_manager_named_in_a_run_s_row_is_the_control_plane_s():
    assert resolve_operator_manager(stages.OPERATOR_MANAGER) is control.request_for_stage


def test_a_run_without_one_makes_no_requests_and_a_wrong_name_fails_at_start():
    assert resolve_operator_manager(None) is None
    with pytest.raises(AttributeError):
        resolve_operator_manager("streamops.control:no_such_function")


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
