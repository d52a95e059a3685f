"""The fault injector's model in the simulator [002] (POLICIES.md §6 "Fault injector").

Per stage, each configured `registry.Fault` is a Poisson process: exponential gaps of mean
`mtbf_s`, each fault with a Gaussian magnitude (`magnitude_s`, sd `magnitude_sd_s`, cut at 0).
A fault hits one replica, picked uniformly among the stage's replicas at that moment. The
schedule depends only on (seed, stage, fault index, kind) or the fault's own `seed`: the same
faults hit a run with 1 replica, with 2, or under the redundancy manager (common random numbers).

Effects on the replica hit (times in simulated seconds; SimConfig names the parameters):
- driver_kill: processes nothing for `restart_s` (supervisor restart from the checkpoint), then
  catches up its backlog. The micro-batch in flight (≤ 1 trigger) is redone: ignored.
- executor_kill: loses one core of its n for `executor_restart_s` (a replacement executor and
  the lost tasks' re-run); with a single core that is everything, so it processes nothing.
- slow_batch: processes nothing for the magnitude (a GC-like pause of the batch).
- heartbeat_cut: no effect on processing; a cut of at least `heartbeat_timeout_s` (3 × 5 s) is
  detected then, and the supervisor kills the silent driver: a driver_kill at cut + 15 s. One
  kill per cut: the restarted driver's heartbeat is taken to get through.
- db_outage: the replica's writes to the sink fail for the magnitude: its output stalls and its
  input backlog builds (Spark's batch cannot commit). It models the replica's link to the sink
  (Dynamo's communication fault); an outage of the database itself would hit every replica.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from streamops.registry import FAULT_KINDS, Fault


@dataclass(frozen=True)
class FaultEvent:
    t: float  # when it strikes (simulated seconds)
    kind: str
    magnitude_s: float  # Gaussian draw cut at 0 (unused by the kills)
    pick: float  # uniform in [0, 1): the replica hit is number ⌊pick · k⌋ of the k at time t


def _rng(fault: Fault, seed: int, stage: str, index: int) -> random.Random:
    # A str seed is hashed with SHA-512 by random.seed: stable across processes and platforms.
    return random.Random(fault.seed if fault.seed is not None else f"{seed}:{stage}:{index}:{fault.kind}")


def fault_schedule(faults: Sequence[Fault], duration_s: float, seed: int, stage: str,
                   periods: Iterable[tuple[float, float]] = ()) -> list[FaultEvent]:
    """Every fault of a stage in [0, duration_s), in time order. `periods` ((start, end) seconds)
    restricts injection to those windows, at the same rate inside them (none: the whole run)."""
    periods = tuple(periods)
    events: list[FaultEvent] = []
    for j, f in enumerate(faults):
        rng, t = _rng(f, seed, stage, j), 0.0
        while True:
            t += rng.expovariate(1.0 / f.mtbf_s)
            if t >= duration_s:
                break
            magnitude = max(0.0, rng.gauss(f.magnitude_s, f.magnitude_sd_s))
            pick = rng.random()
            if not periods or any(a <= t < b for a, b in periods):
                events.append(FaultEvent(t, f.kind, magnitude, pick))
    events.sort(key=lambda e: (e.t, e.kind))
    return events


def parse_faults(text: str | Sequence[Any] | None) -> tuple[Fault, ...]:
    """`kind:name=value,...;kind:...` (e.g. `driver_kill:mtbf_s=120;slow_batch:mtbf_s=60,
    magnitude_s=3`), a list of Fault / dicts, or None. Errors name the kind and the field."""
    if text is None:
        return ()
    if not isinstance(text, str):
        return tuple(f if isinstance(f, Fault) else Fault.model_validate(f) for f in text)
    out = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        kind, _, rest = part.partition(":")
        kw: dict[str, Any] = {"kind": kind.strip()}
        if kw["kind"] not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kw['kind']!r}; valid: {', '.join(FAULT_KINDS)}")
        for item in (i.strip() for i in rest.split(",") if i.strip()):
            name, eq, value = item.partition("=")
            if not eq:
                raise ValueError(f"fault {kw['kind']!r}: expected name=value, got {item!r}")
            kw[name.strip()] = value.strip()
        out.append(Fault.model_validate(kw))
    return tuple(out)


class Blocks:
    """Disjoint, sorted [start, end) intervals in which a replica processes nothing. Kept for
    the whole run: MTTR is read from them at the end."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def __len__(self) -> int:
        return len(self.starts)

    def add(self, a: float, b: float) -> None:
        if b <= a:
            return
        i = bisect.bisect_left(self.ends, a)  # the first interval that ends at or after a
        j = bisect.bisect_right(self.starts, b)  # past the last that starts at or before b
        if i < j:  # they overlap or touch [a, b): merge
            a, b = min(a, self.starts[i]), max(b, self.ends[j - 1])
        self.starts[i:j], self.ends[i:j] = [a], [b]

    def overlap(self, a0: float, a1: float) -> float:
        """Blocked time within [a0, a1)."""
        if a1 <= a0 or not self.starts:
            return 0.0
        total, k = 0.0, bisect.bisect_right(self.ends, a0)
        while k < len(self.starts) and self.starts[k] < a1:
            total += max(0.0, min(a1, self.ends[k]) - max(a0, self.starts[k]))
            k += 1
        return total

    def end_at(self, x: float) -> float:
        """When a replica blocked at x is back processing (x itself if it is not blocked)."""
        k = bisect.bisect_right(self.starts, x) - 1
        return self.ends[k] if k >= 0 and self.ends[k] > x else x

    def remaining(self, x: float) -> float:
        return self.end_at(x) - x


@dataclass
class Replica:
    """One driver of a stage: its own cores (the stage's), backlog and faults."""

    id: int
    born: float
    q: float = 0.0  # rows that reached the stage and this replica has not written yet
    blocks: Blocks = field(default_factory=Blocks)
    degraded: list[tuple[float, float, float]] = field(default_factory=list)  # (start, end, cores lost)
    removed: float | None = None

    def lost_cores(self, t: int) -> float:
        """Core-seconds lost to executor kills in [t, t+1)."""
        if not self.degraded:
            return 0.0
        self.degraded = [d for d in self.degraded if d[1] > t]
        return sum(c * max(0.0, min(t + 1, b) - max(t, a)) for a, b, c in self.degraded)


@dataclass
class Failure:
    t: float
    stage: str
    kind: str
    replica: int
    magnitude_s: float
    start: float | None = None  # the replica's processing stop it caused (None: none)
    end: float | None = None
    restart: bool = False  # a driver restart: counts for MTTR (from `start`, the kill)
    mttr_s: float | None = None  # filled by `finish`: kill → back processing
    output_gap_s: float = 0.0  # filled by `finish`: the stage's output stall during [start, end)

    def as_dict(self) -> dict[str, Any]:
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 3)

        return {"t_s": r(self.t), "stage": self.stage, "kind": self.kind, "replica": self.replica,
                "magnitude_s": r(self.magnitude_s), "stop_s": r(self.start), "stop_end_s": r(self.end),
                "restart": self.restart, "mttr_s": r(self.mttr_s), "output_gap_s": r(self.output_gap_s)}


def strike(e: FaultEvent, rp: Replica, stage: str, cores: int, restart_s: float, executor_restart_s: float,
           heartbeat_timeout_s: float) -> Failure:
    """Apply fault `e` to replica `rp` (see the module docstring for each kind)."""
    f = Failure(e.t, stage, e.kind, rp.id, e.magnitude_s)
    if e.kind == "driver_kill":
        f.start, f.end, f.restart = e.t, e.t + restart_s, True
    elif e.kind == "executor_kill":
        if cores <= 1:
            f.start, f.end = e.t, e.t + executor_restart_s
        else:
            rp.degraded.append((e.t, e.t + executor_restart_s, 1.0))
    elif e.kind == "heartbeat_cut":
        if e.magnitude_s >= heartbeat_timeout_s:
            kill = e.t + heartbeat_timeout_s
            f.start, f.end, f.restart = kill, kill + restart_s, True
    else:  # slow_batch, db_outage
        f.start, f.end = e.t, e.t + e.magnitude_s
    if f.start is not None and f.end is not None:  # set together
        rp.blocks.add(f.start, f.end)
    return f
