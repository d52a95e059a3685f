"""A stopped driver (SIGSTOP, a debugger) is a failure once the supervisor's polls have seen it
stopped for a second, not after the heartbeat limit; a shorter stop is not (issue 31 item 6)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from streamops import processes
from streamops.execute import stops
from streamops.execute.watchdog import detect

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def run(**kw):
    return SimpleNamespace(**{"health": "ok", "status": "running", "pid": 100, "host": socket.gethostname(),
                              "master": "local", "driver_id": None, "pid_started_at": None,
                              "silent_s": 2.0, "server_up_s": 3600, "beat_at": T0 - timedelta(seconds=3),
                              "running_at": T0 - timedelta(minutes=5), "started_at": T0 - timedelta(minutes=5),
                              "stage_id": "a.s", "id": 1, "role": "primary", "stop_reason": None, "stopped_at": None,
                              "beat_info": None, **kw})


class Fake:
    """A clock and a process table for the StopWatch: which pids are stopped now, whose children."""

    def __init__(self, kids: dict[int, list[int]] | None = None) -> None:
        self.t, self.stopped, self.kids, self.child_scans = 0.0, set(), kids or {}, 0

    def children(self, pid: int) -> list[int]:
        self.child_scans += 1
        return self.kids.get(pid, [])

    def watch(self) -> stops.StopWatch:
        return stops.StopWatch(1.0, clock=lambda: self.t, is_stopped=lambda pid: pid in self.stopped,
                               children=self.children)


def polls(fake: Fake, watch: stops.StopWatch, states: list[set[int]], d=None, every_s: float = 0.5):
    """One poll per entry of `states` (the pids stopped at that poll), `every_s` apart: what each saw."""
    seen = []
    for i, st in enumerate(states):
        fake.stopped = st
        seen.append(watch.look([d or run()], T0 + timedelta(seconds=i * every_s)))
        fake.t += every_s
    return seen


@pytest.mark.parametrize("states, found_at", [
    ([set(), {100}, {100}, {100}], 3),          # seen stopped at 0.5, 1.0, 1.5 s: failed at the third sighting
    ([set(), {100}, {100}, set(), {100}, {100}], None),  # two short stops (0.5 s each): never a failure
    ([set(), {101}, {101}, {101}], 3),          # the JVM (the driver's child) stopped, the driver itself not
    ([set(), set(), set()], None),              # running
])
def test_a_driver_is_stopped_once_seen_so_on_consecutive_polls_for_the_hold(states, found_at):
    fake = Fake({100: [101]})
    seen = polls(fake, fake.watch(), states)
    hits = [i for i, s in enumerate(seen) if s]
    assert (hits[0] if hits else None) == found_at, seen
    if found_at is not None:
        stop = seen[found_at][1]
        assert stop.last_running == T0, "the last poll that saw it running is when it stopped, at the latest"
        assert stop.pid == (101 if 101 in states[found_at] else 100) and stop.for_s == 1.0
        assert ("its JVM" in stop.detail) is (stop.pid == 101)


def test_a_stop_is_judged_only_for_live_runs_on_this_host_and_the_children_are_not_scanned_every_poll():
    fake = Fake({100: [101]})
    for d in (run(host="elsewhere"), run(status="stopping"), run(pid=None)):
        watch = fake.watch()
        assert polls(fake, watch, [{100}] * 4, d=d) == [{}] * 4, d
    fake.child_scans = 0
    polls(fake, fake.watch(), [set()] * 20)  # 10 s of polls
    assert fake.child_scans == 2, "a scan of /proc every 5 s, not every poll"


def test_a_stopped_run_is_a_stopped_failure_timed_at_its_last_sighting_running():
    me = os.getpid()  # a process that lives: not a dead_pid
    stop = stops.Stopped(me, me, 1.0, T0)
    [f] = detect(15, candidates=[run(pid=me)], stopped={1: stop})
    assert (f.kind, f.failed_at) == ("stopped", T0) and f"driver pid {me} is stopped" in f.detail
    [f] = detect(15, candidates=[run(pid=me)], stopped={1: stops.Stopped(me, me, 1.0, None)})
    assert f.failed_at == T0 - timedelta(seconds=3), "never seen running: its last beat"
    [f] = detect(15, candidates=[run(pid=me, silent_s=20.0)], stopped={1: stop})
    assert f.kind == "stopped", "stopped long ago and silent too: the cause is the stop"
    [f] = detect(15, candidates=[run(pid=me, silent_s=20.0)])
    assert f.kind == "stale_heartbeat", "without the supervisor's look (the DAG), the heartbeat decides"


def test_the_kernel_says_a_sigstopped_process_and_its_child_are_stopped():
    proc = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                             "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                             "print('up', flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout.readline() == b"up\n"
        [kid] = processes.children(proc.pid)
        assert not stops.stopped_now(proc.pid)
        os.kill(kid, signal.SIGSTOP)  # the child alone (a driver's JVM)
        assert processes.is_stopped(kid) or _eventually_stopped(kid)
        assert stops.stopped_now(proc.pid) and not processes.is_stopped(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)  # reaches stopped processes, the whole group
        proc.wait(10)
        assert not processes.is_stopped(proc.pid) and processes.children(proc.pid) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _eventually_stopped(pid: int) -> bool:
    from streamops.waiting import wait_until

    return bool(wait_until(lambda: processes.is_stopped(pid), 5, 0.05))
