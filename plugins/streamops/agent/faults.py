"""The fault injector inside a stage's driver [002]: faults arrive as a Poisson process per kind
(exponential gaps of mean `mtbf_s`), each with a Gaussian magnitude (seconds, cut at 0).

Kinds and what each does here (the driver supplies the actions that need Spark):
- slow_batch: the next batch pauses `magnitude` seconds before it writes (a straggler, a GC pause);
- driver_kill: SIGKILL of the driver's process group (its JVM included), as `kill -9` would;
- executor_kill: one executor of a cluster pool is killed; the master starts another;
- heartbeat_cut: no heartbeat for `magnitude` seconds (past 15 s the supervisor calls it hung);
- db_outage: every database access of the driver fails for `magnitude` seconds
  (`db.inject_outage`), through the same paths a real outage takes.

Every fault is recorded in `injected_faults` before it acts (persist first: a driver kill leaves
its row behind), so reports and the `failures` rows can tell injected failures from real ones.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from streamops.registry import TIMED_FAULTS, Fault
from streamops.store import db

log = logging.getLogger("streamops.faults")

Action = Callable[[float | None], str]  # magnitude → what was done (the row's detail)


@dataclass
class Arrival:
    fault: Fault
    at: float  # monotonic
    rng: random.Random


def draw_gap(rng: random.Random, mtbf_s: float) -> float:
    return rng.expovariate(1.0 / mtbf_s)


def draw_magnitude(rng: random.Random, fault: Fault) -> float | None:
    if fault.kind not in TIMED_FAULTS:
        return None
    return max(0.0, rng.gauss(fault.magnitude_s, fault.magnitude_sd_s))


class FaultInjector(threading.Thread):
    def __init__(self, stage_id: str, deployment_id: int, role: str, actions: dict[str, Action],
                 schedule: list[Fault] | None = None, seed: int | None = None) -> None:
        super().__init__(name=f"faults-{stage_id}", daemon=True)
        self.stage_id, self.deployment_id, self.role, self.actions = stage_id, deployment_id, role, actions
        # Seeded per run, so two replicas (or two restarts) of a seeded schedule draw different gaps.
        self.seed = seed
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._arrivals: list[Arrival] = []
        self.set_schedule(schedule or [])

    def set_schedule(self, faults: list[Fault]) -> None:
        now = time.monotonic()
        with self._lock:
            self._arrivals = []
            for i, f in enumerate(faults):
                base = f.seed if f.seed is not None else self.seed
                # Per run: two replicas (or a restart) of one seeded schedule must not fail in step.
                rng = random.Random(None if base is None else f"{base}:{self.deployment_id}:{i}")
                self._arrivals.append(Arrival(f, now + draw_gap(rng, f.mtbf_s), rng))
        self._wake.set()
        if faults:
            log.info("stage %s: action=fault-schedule %s", self.stage_id,
                     ", ".join(f"{f.kind} every {f.mtbf_s:g}s" for f in faults))

    def inject(self, kind: str, magnitude_s: float | None, source: str) -> str:
        """Record the fault, then cause it; returns what was done."""
        act = self.actions.get(kind)
        if act is None:
            detail = f"{kind}: not possible in this run (no executors to kill on a local pool)"
            log.warning("stage %s: action=fault skipped: %s", self.stage_id, detail)
            return detail
        db.write("injected_fault_insert", stage_id=self.stage_id, deployment_id=self.deployment_id, role=self.role,
                 kind=kind, magnitude_s=magnitude_s, source=source, detail="")
        log.warning("stage %s: action=fault-injected kind=%s magnitude=%s source=%s", self.stage_id, kind,
                    None if magnitude_s is None else round(magnitude_s, 2), source)
        return act(magnitude_s)

    def run(self) -> None:
        while not self._closing.is_set():
            with self._lock:
                nxt = min(self._arrivals, key=lambda a: a.at, default=None)
            wait = None if nxt is None else max(0.0, nxt.at - time.monotonic())
            self._wake.clear()
            if self._wake.wait(wait if wait is not None else 3600) or self._closing.is_set() or nxt is None:
                continue  # a new schedule (or closing, or nothing scheduled): look again
            with self._lock:
                nxt.at = time.monotonic() + draw_gap(nxt.rng, nxt.fault.mtbf_s)
            try:
                self.inject(nxt.fault.kind, draw_magnitude(nxt.rng, nxt.fault), "schedule")
            except Exception as e:  # an injected outage may still hold: try the next arrival
                log.warning("stage %s: fault %s not injected: %s", self.stage_id, nxt.fault.kind, e)

    def close(self) -> None:
        self._closing.set()
        self._wake.set()


class BatchPause:
    """The slow-batch fault's effect: the next batch sleeps this long before it writes."""

    def __init__(self) -> None:
        self._pending = 0.0
        self._lock = threading.Lock()

    def add(self, seconds: float | None) -> str:
        with self._lock:
            self._pending += seconds or 0.0
        return f"the next batch pauses {seconds or 0:.1f}s"

    def take(self) -> float:
        with self._lock:
            s, self._pending = self._pending, 0.0
        if s > 0 and math.isfinite(s):
            time.sleep(s)
        return s
