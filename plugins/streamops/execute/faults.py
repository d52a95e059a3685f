"""The fault injector's stage-level side: `streamops fault STAGE --kind …` and the benchmark.

One fault goes to one live replica of the stage as a `fault` command; its driver records it in
`injected_faults` and causes it (streamops.agent.faults). With an MTBF, a seeded Poisson process
over the stage picks the arrival times, the magnitudes and which replica is hit, so two runs with
the same seed inject the same faults whatever the replica set does. (A schedule in apps.yaml
runs inside each driver instead, with draws of its own per run.)
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass

from streamops.agent.faults import draw_gap, draw_magnitude
from streamops.execute import replicas
from streamops.registry import FAULT_KINDS, Fault
from streamops.run_spec import CommandOutcome, FaultArgs
from streamops.store import ledger
from streamops.waiting import wait_until

log = logging.getLogger("streamops.faults")


@dataclass(frozen=True)
class Sent:
    at: float  # seconds since the schedule started
    kind: str
    role: str | None  # None: no live replica to hit
    magnitude_s: float | None
    outcome: str


def send(sid: str, kind: str, magnitude_s: float | None = None, *, role: str | None = None,
         rng: random.Random | None = None, wait_s: float = 10.0, source: str = "cli") -> Sent:
    """Inject one fault into a live replica of the stage (`role`, else one picked by `rng`)."""
    if kind not in FAULT_KINDS:
        raise ValueError(f"unknown fault kind {kind!r}; one of {', '.join(FAULT_KINDS)}")
    live = replicas.live_roles(sid)
    running = {r: d for r, d in live.items() if d.status == "running"}
    if role is not None and role not in running:
        raise LookupError(f"stage {sid} has no running {role}; running: {', '.join(running) or 'none'}")
    if not running:
        return Sent(0.0, kind, None, magnitude_s, "no running replica: nothing injected")
    target = role or (rng or random).choice(sorted(running))
    dep = running[target]
    cid = ledger.send_command(sid, dep.id, "fault", FaultArgs(kind=kind, magnitude_s=magnitude_s, source=source),
                              "fault injector")
    # A driver kill never reports back: its row in injected_faults is the record.
    done = wait_until(lambda: (c := ledger.command(cid)).done_at is not None and c, wait_s, 0.2)
    said = CommandOutcome.parse(done.outcome) if done else None
    outcome = "sent" if said is None else said.detail if said.ok else str(said)
    log.warning("stage %s: action=fault kind=%s role=%s magnitude=%s: %s", sid, kind, target, magnitude_s, outcome)
    return Sent(0.0, kind, target, magnitude_s, outcome)


def run_schedule(sid: str, faults: list[Fault], duration_s: float, *, seed: int | None = None,
                 stop: threading.Event | None = None, progress=lambda _: None) -> list[Sent]:
    """Inject faults into the stage for `duration_s`: per kind, exponential gaps of its MTBF."""
    rng = random.Random(seed)
    stop = stop or threading.Event()
    t0 = time.monotonic()
    arrivals = [(draw_gap(rng, f.mtbf_s), i) for i, f in enumerate(faults)]
    sent: list[Sent] = []
    while arrivals:
        at, i = min(arrivals)
        if at > duration_s or stop.wait(max(0.0, t0 + at - time.monotonic())):
            break
        f = faults[i]
        s = send(sid, f.kind, draw_magnitude(rng, f), rng=rng, wait_s=2.0, source="schedule")
        sent.append(Sent(round(time.monotonic() - t0, 2), s.kind, s.role, s.magnitude_s, s.outcome))
        progress(f"{sid}: t={sent[-1].at:.0f}s {f.kind} → {s.role or 'nobody'}: {s.outcome}")
        arrivals = [(a, j) for a, j in arrivals if j != i] + [(at + draw_gap(rng, f.mtbf_s), i)]
    return sent
