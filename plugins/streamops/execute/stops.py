"""Drivers that are stopped: SIGSTOP, SIGTSTP, a debugger's stop (issue 31 item 6).

A stopped driver is alive (its pid runs, so it is no `dead_pid`), but it cannot beat or commit.
By its heartbeat alone it is found only after `stale_s` (15 s). The supervisor runs on the
drivers' host and can ask the kernel instead: a driver whose process, or its JVM (the driver's
direct child), is seen stopped on consecutive polls for `hold_s` (0.5 s: two polls) has failed. A stop
shorter than that (a debugger's quick look, a SIGSTOP followed at once by SIGCONT) is not a
failure. Its failure time is the last poll that saw it running: the stop happened after it.

Only drivers on this host are judged: another host's processes cannot be asked, and for them
the heartbeat decides, as before.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from streamops import processes

# Seen stopped on two polls in a row (0.5 s apart): a failure. A process in the stopped state makes no
# progress at all, and nothing in normal operation stops one, so a second sighting is proof enough.
HOLD_S = 0.5
CHILDREN_EVERY_S = 5.0  # a driver's child processes are looked up again this often (a scan of /proc)


@dataclass(frozen=True)
class Stopped:
    pid: int  # the stopped process: the driver, or its JVM
    driver_pid: int
    for_s: float  # seen stopped for this long
    last_running: datetime | None  # the last poll that saw the driver running; None: never seen so

    @property
    def detail(self) -> str:
        what = f"driver pid {self.driver_pid}" if self.pid == self.driver_pid else \
            f"driver pid {self.driver_pid}'s child process {self.pid} (its JVM)"
        return f"{what} is stopped (SIGSTOP, SIGTSTP or a debugger), seen so for {self.for_s:.1f}s"


def on_this_host(d) -> bool:
    host = getattr(d, "host", None)
    return not host or host == socket.gethostname()


class StopWatch:
    """What the supervisor's polls saw of each live run's driver: since when it is seen stopped
    without a break, and when it was last seen running. `look` once per poll."""

    def __init__(self, hold_s: float = HOLD_S, clock: Callable[[], float] = time.monotonic,
                 is_stopped: Callable[[int], bool] = processes.is_stopped,
                 children: Callable[[int], list[int]] = processes.children) -> None:
        self.hold_s = hold_s
        self._clock, self._is_stopped, self._children = clock, is_stopped, children
        self._stopped_since: dict[int, float] = {}  # deployment id -> monotonic, first of the unbroken sightings
        self._running_at: dict[int, datetime] = {}  # deployment id -> the last poll that saw it running
        self._kids: dict[int, tuple[float, list[int]]] = {}  # deployment id -> (looked up at, child pids)

    def look(self, candidates: Iterable, now: datetime) -> dict[int, Stopped]:
        """The runs (by deployment id) whose driver has been seen stopped for `hold_s` or more,
        among the live runs of this host in `candidates` (`watchdog_candidates` rows)."""
        mono = self._clock()
        out, seen = {}, set()
        for d in candidates:
            if d.status not in ("starting", "running") or d.pid is None or not on_this_host(d):
                continue
            seen.add(d.id)
            pid = self._stopped_member(d.id, d.pid, mono)
            if pid is None:
                self._stopped_since.pop(d.id, None)
                self._running_at[d.id] = now
                continue
            since = self._stopped_since.setdefault(d.id, mono)
            if mono - since >= self.hold_s:
                out[d.id] = Stopped(pid, d.pid, mono - since, self._running_at.get(d.id))
        for known in (self._stopped_since, self._running_at, self._kids):
            for gone in set(known) - seen:
                del known[gone]
        return out

    def _stopped_member(self, dep_id: int, pid: int, mono: float) -> int | None:
        """The driver's pid if it is stopped, else its JVM's if that is, else None."""
        if self._is_stopped(pid):
            return pid
        looked, kids = self._kids.get(dep_id, (None, []))
        if looked is None or mono - looked >= CHILDREN_EVERY_S:
            kids = self._children(pid)
            self._kids[dep_id] = (mono, kids)
        return next((k for k in kids if self._is_stopped(k)), None)


def stopped_now(pid: int) -> bool:
    """One look, now: is the driver `pid` or one of its children (its JVM) stopped?"""
    return processes.is_stopped(pid) or any(processes.is_stopped(k) for k in processes.children(pid))
