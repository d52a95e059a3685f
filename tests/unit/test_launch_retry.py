"""A launch_failed retry waits without holding the stage lock, and its waits are jittered (issue
44, item 13). Pure: the stage lock is a threading stand-in with `rstore.StageLock`'s protocol
(the real one, a PostgreSQL advisory lock, is tested in test_give_up_and_busy.py); the failures,
ledger and launch calls are stubbed."""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from streamops.execute import supervisor as sup_mod
from streamops.execute import watchdog
from streamops.store import reconfigurations as rstore


class FakeStageLock:
    """rstore.StageLock over a threading.Lock: truthy when held; `pause` lets go for a wait."""

    def __init__(self, lock: threading.Lock):
        self.lock, self.held = lock, lock.acquire(blocking=False)

    def __bool__(self):
        return self.held

    def pause(self, seconds: float) -> bool:
        if self.held:
            self.lock.release()
        time.sleep(seconds)
        self.held = self.lock.acquire(blocking=False)
        return self.held


@pytest.fixture
def stage_locks(monkeypatch):
    locks: dict[str, threading.Lock] = {}

    @contextlib.contextmanager
    def stage_lock(stage_id):
        lock = FakeStageLock(locks.setdefault(stage_id, threading.Lock()))
        try:
            yield lock
        finally:
            if lock.held:
                lock.lock.release()

    monkeypatch.setattr(rstore, "stage_lock", stage_lock)
    return stage_lock


@pytest.fixture
def launch(monkeypatch):
    """A launch_failed failure on its second restart (a wait of 2.5-5 s), the launch recorded."""
    started, latest = [], {"id": 7}
    monkeypatch.setattr(watchdog.failures, "open_failure", lambda *a, **k: (1, 1, False))
    monkeypatch.setattr(watchdog.failures, "count_attempt", lambda *a: None)
    monkeypatch.setattr(watchdog.failures, "recovered", lambda *a: SimpleNamespace(mttr_ms=1.0, downtime_ms=1.0))
    monkeypatch.setattr(watchdog.ledger, "deployment", lambda _: SimpleNamespace(id=7, pid=None, checkpoint="/x"))
    monkeypatch.setattr(watchdog.ledger, "finish", lambda *a, **k: None)
    monkeypatch.setattr(watchdog.ledger, "latest_run", lambda sid, role="primary": SimpleNamespace(id=latest["id"]))
    monkeypatch.setattr(watchdog, "repair_checkpoint", lambda *a, **k: None)
    monkeypatch.setattr(watchdog, "still_failed", lambda *a, **k: True)
    monkeypatch.setattr(rstore, "active_stage_ids", lambda: [])
    monkeypatch.setattr(watchdog.stages, "start_stage",
                        lambda sid, reg, **kw: started.append(sid) or SimpleNamespace(deployment_id=8))
    monkeypatch.setattr(watchdog.mechanisms, "wait_first_output",
                        lambda *a, **k: (datetime.now(UTC), None, None))
    f = watchdog.Failure("a.s", 7, "launch_failed", "launch failed: master down", datetime.now(UTC))
    reg = SimpleNamespace(stage=lambda sid: None)
    sup = sup_mod.Supervisor(reg, sup_mod.SupervisorOptions(warm_spares=False))
    return SimpleNamespace(f=f, sup=sup, started=started, latest=latest)


def _in_thread(fn):
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    return t, out


def _take_within(stage_lock, sid: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with stage_lock(sid) as free:
            if free:
                return True
        time.sleep(0.05)
    return False


def test_while_a_launch_retry_waits_another_caller_takes_the_stage_lock(stage_locks, launch):
    t, out = _in_thread(lambda: launch.sup._recover(launch.f, "a"))
    time.sleep(0.5)  # the recovery holds the lock, then waits before its restart
    taken = _take_within(stage_locks, "a.s", 1.5)
    t.join(15)
    assert taken, "the retry's wait held the stage lock"
    assert out and out[0].status == "recovered" and launch.started == ["a.s"], "re-taken, the retry went on"


def test_a_retry_no_longer_wanted_after_its_wait_does_not_relaunch(stage_locks, launch):
    t, out = _in_thread(lambda: launch.sup._recover(launch.f, "a"))
    time.sleep(0.5)
    launch.latest["id"] = 9  # someone started the stage meanwhile
    t.join(15)
    assert launch.started == [] and out and out[0].status == "retrying"


def test_launch_retry_waits_are_jittered():
    waits = [watchdog.restart_delay("launch_failed", 3) for _ in range(20)]
    assert len(set(waits)) > 1, "stages failing together would retry in step"
    assert all(10.0 <= w <= 20.0 for w in waits)
