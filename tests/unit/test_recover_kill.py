"""The watchdog's recovery kills a hung driver only when the recorded pid is still that driver on
this host (issue 44, item 8): a reused pid and another host's driver are left alive. Pure: the
failures and ledger calls are stubbed; the processes are real."""

from __future__ import annotations

import socket
import subprocess
import sys
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from streamops import processes
from streamops.execute import watchdog


@pytest.fixture
def bystander():
    """A process in a session of its own (a kill of its group reaches nothing else)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def _recover(monkeypatch, dep):
    monkeypatch.setattr(watchdog.failures, "open_failure", lambda *a, **k: (1, 0, True))
    monkeypatch.setattr(watchdog.failures, "note", lambda *a, **k: None)
    monkeypatch.setattr(watchdog.failures, "give_up", lambda *a, **k: None)
    monkeypatch.setattr(watchdog.ledger, "deployment", lambda _: dep)
    monkeypatch.setattr(watchdog.ledger, "finish", lambda *a, **k: None)
    f = watchdog.Failure("a.s", dep.id, "stopped", "stopped for 30s", datetime.now(UTC),
                         given_up="test: recorded only, not restarted")
    return watchdog.recover(f, "a", None)


def _alive_after(proc, seconds=1.0) -> bool:
    """A SIGKILL is delivered asynchronously: give it time to land."""
    try:
        proc.wait(seconds)
    except subprocess.TimeoutExpired:
        return True
    return False


def _dep(proc, **kw):
    return SimpleNamespace(**{"id": 7, "stage_id": "a.s", "pid": proc.pid, "driver_id": None, "master": "local",
                              "host": socket.gethostname(), "pid_started_at": processes.started_at(proc.pid),
                              "checkpoint": "/nowhere", "config": {}, **kw})


def test_a_recorded_pid_now_another_process_is_not_killed(monkeypatch, bystander):
    _recover(monkeypatch, _dep(bystander, pid_started_at=processes.started_at(bystander.pid) - 3600))
    assert _alive_after(bystander), "a pid the kernel reused for another process was SIGKILLed"


def test_a_driver_on_another_host_is_not_killed_here(monkeypatch, bystander):
    _recover(monkeypatch, _dep(bystander, host="another-host"))
    assert _alive_after(bystander), "a local process with another host's driver's pid was SIGKILLed"


def test_the_recorded_driver_on_this_host_is_still_killed(monkeypatch, bystander):
    _recover(monkeypatch, _dep(bystander))
    assert not _alive_after(bystander, 10)
