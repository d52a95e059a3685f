"""The mechanisms choose themselves (POLICIES.md §5, docs/reconfiguration.md "Choosing").

Each mechanism has a pure `Rule` here: its `refusal` of a change it cannot carry out at all
(asked when a person names it) and its `estimated_outage` of a change it is offered (an
`Estimate` in seconds, or a `Refusal` with the reason). A change that names no mechanism (a
policy's grant, `auto`) gets the registered rule with the smallest estimate (`choose`); on equal
estimates, one that starts no new driver first, then the first registered.

`RULES` is the one list of mechanisms. `execute.mechanisms` pairs each rule with the code that
carries it out (and refuses to load if one lacks it); the simulator builds the same `Situation`
from its own stage and asks the same `choose`, so it picks exactly what production picks. A new
mechanism is a rule here, its module in execute/mechanisms/ and its line in that package's
`MECHANISMS` (docs/architecture.md, "Adding a mechanism").

The estimates are the measured orders of magnitude, not predictions: they only have to rank the
mechanisms as their measurements do (docs/reconfiguration.md, docs/jobs.md "Through every
mechanism"). The cost model (plan/cost.py) learns the real outages per stage afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from streamops.plan.kinds import Action, MechanismName
from streamops.plan.mechanism import in_driver_refusal, live_refusal

# Outages in seconds, as measured (docs/reconfiguration.md unless said otherwise).
LIVE_S = 0.0  # none: the query keeps running while executors come or go (its gap stays the stage's own)
ACTIVE_BACKUP_S = 0.0  # about none: one run or the other writes (1.76 s median gap in an upgrade: a batch)
IN_DRIVER_S = 4.5  # stop at a batch boundary + repartition + first batch, no JVM start (4.5 s at 10k keys)
PRESTAGED_S = 10.0  # stop + a new driver's start (6–10 s locally) + the replay since the copy
PAUSE_RESUME_S = 16.0  # stop + copy + a new driver + repartition + first batch (14.6–18.2 s locally, 39 s on a cluster)

# Why a rule that could run declines to be chosen for a scale-in (the choice's, not a hard refusal).
IN_THE_WINDOW = "a scale-in runs in the maintenance window, where a short outage is accepted"


@dataclass(frozen=True)
class Situation:
    """What every rule judges, read once (by `execute.reconfigure` under the stage lock, by the
    simulator from its stage): the change asked for, and the stage's run and pools as they are."""

    action: str
    running: bool  # the stage has a live primary
    pool: str  # the live run's pool (the row's `from_pool` when not running)
    pool_kind: str  # local | standalone
    executor_cores: int
    current_cores: int | None  # the live run's, None when not running
    target_pool: str | None  # None: the same pool
    target_cores: int  # the row's target, else the cores it has
    target_partitions: int | None  # None: the same state partitions
    state_partitions: int | None  # of the live run's checkpoint
    target_pool_free: int  # free cores of the target pool
    target_pool_total: int
    staged_ready: bool  # a staged copy of the checkpoint is ready (the alarming level's pre-stage)
    source_kind: str = "files"  # of the stage's spec: files | kafka


@dataclass(frozen=True)
class Estimate:
    """The outage a mechanism expects for the change, and why."""

    seconds: float
    why: str


@dataclass(frozen=True)
class Refusal:
    """Why a mechanism is not offered for the change."""

    why: str


class Rule(Protocol):
    """The pure half of a mechanism. `new_driver`: it starts a new driver (a JVM) for the
    change, which breaks ties against it."""

    @property
    def name(self) -> str: ...

    @property
    def new_driver(self) -> bool: ...

    def refusal(self, s: Situation) -> str | None:
        """Why it cannot carry out this change at all, or None: asked when a person names it."""
        ...

    def estimated_outage(self, s: Situation) -> Estimate | Refusal:
        """Its outage for this change when the cost rule offers it one, or why it declines."""
        ...


class Live:
    name = MechanismName.LIVE
    new_driver = False

    def refusal(self, s: Situation) -> str | None:
        if not s.running:
            return "not a live change: the stage is not running"
        why = live_refusal(s.action, s.pool_kind, s.pool, s.target_pool, s.target_cores, s.executor_cores,
                           s.state_partitions, s.target_partitions)
        return f"not a live change: {why}" if why else None

    def estimated_outage(self, s: Situation) -> Estimate | Refusal:
        if why := self.refusal(s):
            return Refusal(why)
        return Estimate(LIVE_S, "executors are added or removed while the query runs: no outage, no new driver")


class ActiveBackup:
    name = MechanismName.ACTIVE_BACKUP
    new_driver = True

    def refusal(self, s: Situation) -> str | None:
        """No copy is taken for a secondary that cannot start (start_stage checks again, under the pool lock)."""
        if s.source_kind == "kafka":
            # Catch-up is judged by the two runs' file source logs; a topic's offsets are not compared yet.
            return "a Kafka stage has no file source log to judge a secondary's catch-up by"
        if s.running and s.target_pool_free < s.target_cores:
            return (f"pool {s.target_pool or s.pool!r} has {s.target_pool_free} free of {s.target_pool_total} cores; "
                    f"the new run needs {s.target_cores} beside the running one")
        return None

    def estimated_outage(self, s: Situation) -> Estimate | Refusal:
        if why := self.refusal(s):
            return Refusal(why)
        if not s.running:
            return Refusal("the stage is not running: there is no old run to overlap")
        if s.action == Action.SCALE_IN:
            return Refusal(IN_THE_WINDOW)
        return Estimate(ACTIVE_BACKUP_S, f"the target pool has {s.target_pool_free} free cores for the new run "
                                         f"beside the old one: no outage")


class InDriver:
    name = MechanismName.IN_DRIVER
    new_driver = False

    def refusal(self, s: Situation) -> str | None:
        if not s.running or s.current_cores is None:
            return "not an in-driver change: the stage is not running"
        why = in_driver_refusal(s.action, s.pool_kind, s.pool, s.target_pool, s.current_cores, s.target_cores,
                                s.executor_cores)
        return f"not an in-driver change: {why}" if why else None

    def estimated_outage(self, s: Situation) -> Estimate | Refusal:
        if why := self.refusal(s):
            return Refusal(why)
        return Estimate(IN_DRIVER_S, "the driver repartitions its own state between two batches: no new JVM")


class Prestaged:
    name = MechanismName.PRESTAGED
    new_driver = True

    def refusal(self, s: Situation) -> str | None:
        return None  # a stage that is not running fails in `run` and is restored, as before

    def estimated_outage(self, s: Situation) -> Estimate | Refusal:
        if not s.running:
            return Refusal("the stage is not running: there is no old run to stage from")
        if s.action == Action.SCALE_IN:
            return Refusal(IN_THE_WINDOW)
        if not s.staged_ready:
            # It would stage a copy first and replay from it: the slowest of all (docs/jobs.md, 58 s
            # and 29 s against pause_resume's 34 s and 25 s).
            return Refusal("nothing staged")
        return Estimate(PRESTAGED_S, "a copy was staged at the alarming level: no copy or repartition in the outage")


class PauseResume:
    name = MechanismName.PAUSE_RESUME
    new_driver = True

    def refusal(self, s: Situation) -> str | None:
        return None  # it needs no running stage and no room beside it

    def estimated_outage(self, s: Situation) -> Estimate | Refusal:
        if not s.running:
            return Estimate(PAUSE_RESUME_S, "the stage is not running: it is started with the new configuration")
        return Estimate(PAUSE_RESUME_S, "stop, copy, start a new driver that repartitions offline: it needs "
                                        "no room and no staged copy")


# The registered mechanisms, by name: the one list the executor, the simulator, the CLI's help
# and the DAG forms read. Registration order breaks the last ties.
RULES: dict[str, Rule] = {r.name: r for r in (Live(), InDriver(), PauseResume(), Prestaged(), ActiveBackup())}


class NoMechanism(RuntimeError):
    """Every registered mechanism declined the change (pause_resume never does)."""


@dataclass(frozen=True)
class Choice:
    mechanism: str
    estimate: Estimate
    refused: tuple[tuple[str, str], ...]  # (name, why) of each mechanism that declined

    @property
    def why(self) -> str:
        """The winner's reason and estimate, then why each mechanism that declined did."""
        return "; ".join([f"{self.estimate.why} (about {self.estimate.seconds:g} s)",
                          *(f"not {name}: {why}" for name, why in self.refused)])


def choose(s: Situation) -> Choice:
    """The cost rule for a change that names no mechanism: the registered mechanism with the
    smallest estimated outage; on equal estimates one that starts no new driver, then the
    first registered."""
    judged = [(i, rule, rule.estimated_outage(s)) for i, rule in enumerate(RULES.values())]
    offers = [(e.seconds, rule.new_driver, i, rule.name, e) for i, rule, e in judged if isinstance(e, Estimate)]
    if not offers:
        raise NoMechanism("every mechanism declined: " + "; ".join(
            f"{rule.name}: {e.why}" for _, rule, e in judged if isinstance(e, Refusal)))
    *_, name, best = min(offers, key=lambda o: o[:3])
    return Choice(str(name), best, tuple((str(rule.name), e.why) for _, rule, e in judged if isinstance(e, Refusal)))
