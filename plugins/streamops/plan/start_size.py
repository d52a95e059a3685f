"""The cores a new deployment starts at: the size its input needs, not `cores.initial` (issue 48,
item 10). Pure: plain numbers in, a size and its reason out. `execute/start_inputs` gathers the
numbers (the stage's last run and its metrics, the backlog waiting now, the pool's room); the
simulator (sim.model.sized_start) and the tests call `start_size` directly.

    cores = max(cores.initial, the size the stage last ran at if that was recent, n*)
            capped at cores.max, the pool's free cores and the source's partitions,
            never below cores.initial (a pool without that much room refuses the start, as before)

    n* = ceil((input rate + backlog / catch_up_s) / (rows/s per core × target_utilization))

n* is DS2's target (POLICIES.md §3.3, analyze.stats.ds2_target) with the policy's own `catch_up_s`
and `target_utilization`. The input rate is the one measured over the stage's last run, else the
registry's declared `source.expected_rows_s` (neither: the backlog alone is the demand); the rate
per core is the registry's
declared `cores.per_core_rows_s`, else DS2's true processing rate from the last run's metrics.
Without a rate per core, or with neither a rate nor a backlog, there is no n*: the stage starts at
its last size or at `cores.initial`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

# A stopped stage's last size counts as evidence for this long after its run ended (ours: a
# stage stopped for a night's maintenance comes back at its size; one stopped for a week
# starts from what its input needs now).
RECENT_S = 6 * 3600.0


@dataclass(frozen=True)
class StartInputs:
    """What a start is sized by. None: not known."""

    initial: int  # cores.initial: the floor
    max_cores: int  # cores.max
    last_cores: int | None = None  # the size the stage last ran at
    last_age_s: float = 0.0  # since that run ended (0: it ended just now, or still runs)
    input_rate: float | None = None  # rows/s arriving, measured over the last run
    input_rate_age_s: float = 0.0  # since that measure's last batch
    declared_input_rate: float | None = None  # the registry's source.expected_rows_s: used without a measure
    backlog_rows: float | None = None  # rows waiting now
    rate_per_core: float | None = None  # rows/s one core processes
    rate_per_core_declared: bool = False  # the registry's cores.per_core_rows_s (else measured)
    free_cores: int | None = None  # the pool's free cores for this start
    reserved_cores: int = 0  # of those, kept for the pool's other stages not running (their cores.initial)
    useful_cores: int | None = None  # tasks the source can feed at once (a Kafka topic's partitions)
    step: int = 1  # cores come in executors of this many (a standalone pool's executor_cores)


@dataclass(frozen=True)
class StartSize:
    cores: int
    reason: str  # "starts at 2 cores: …", for the run's record and the log
    estimate: int | None = None  # n* before the floor and the caps; None without one


def _cores(n: int) -> str:
    return f"{n} core{'' if n == 1 else 's'}"


def estimate(inp: StartInputs, catch_up_s: float = 60.0, target_utilization: float = 0.7) -> tuple[int | None, str]:
    """n* and the figures it came from, or (None, why there is none)."""
    if inp.rate_per_core is None or inp.rate_per_core <= 0:
        return None, "no rows/s per core declared or measured"
    rate, rate_is = (inp.input_rate, "measured over the last run") if inp.input_rate is not None \
        else (inp.declared_input_rate, "declared")
    if rate is None and inp.backlog_rows is None:
        return None, "no input rate or backlog known"
    parts = []
    if inp.backlog_rows is not None:
        parts.append(f"{inp.backlog_rows:,.0f} rows waiting (caught up in {catch_up_s:.0f} s)")
    if rate is not None:
        parts.append(f"{rate:,.1f} rows/s {rate_is}")
    demand = (rate or 0.0) + max(0.0, inp.backlog_rows or 0.0) / catch_up_s
    n = max(1, math.ceil(demand / (inp.rate_per_core * target_utilization) - 1e-9))
    per_core = "declared" if inp.rate_per_core_declared else "measured"
    return n, (f"{' + '.join(parts)}, {inp.rate_per_core:,.1f} rows/s per core ({per_core}) at "
               f"{target_utilization:.0%} utilization: {_cores(n)}")


def start_size(inp: StartInputs, catch_up_s: float = 60.0, target_utilization: float = 0.7,
               recent_s: float = RECENT_S) -> StartSize:
    """The cores a new deployment starts at, and why (see the module's docstring)."""
    floor = inp.initial
    if inp.input_rate is not None and inp.input_rate_age_s > recent_s:
        inp = replace(inp, input_rate=None)  # a rate from long ago says nothing about the input now (a
        # declared one, if any, stands in)
    n_star, figures = estimate(inp, catch_up_s, target_utilization)
    last = inp.last_cores if inp.last_cores is not None and inp.last_age_s <= recent_s else None
    wanted = _up(max(floor, last or 0, n_star or 0), inp.step)
    caps = [(inp.max_cores, f"cores.max {inp.max_cores}")]
    if inp.free_cores is not None:
        kept = f" ({inp.reserved_cores} kept for its other stages' cores.initial)" if inp.reserved_cores else ""
        caps.append((inp.free_cores - inp.reserved_cores, f"the pool's {_cores(inp.free_cores)} free{kept}"))
    if inp.useful_cores is not None:
        caps.append((inp.useful_cores, f"the source's {inp.useful_cores} partitions"))
    cap, cap_why = min(caps, key=lambda c: c[0])
    cap = cap // inp.step * inp.step
    cores = max(floor, min(wanted, cap))

    said = []
    if n_star is not None:
        said.append(figures)
    elif last is None:
        said.append(figures)  # why the input could not size it
    if last is not None:
        said.append(f"last ran at {_cores(last)} {_ago(inp.last_age_s)}")
    elif inp.last_cores is not None:
        said.append(f"its last size ({_cores(inp.last_cores)}) is {_ago(inp.last_age_s)}, too old to count")
    if wanted > cores:
        said.append(f"capped at {cap_why}" if cores == cap else f"held at cores.initial {floor}: {cap_why}")
    elif inp.step > 1 and n_star is not None and cores == wanted > max(floor, last or 0, n_star):
        said.append(f"in executors of {_cores(inp.step)}")
    if cores == floor and max(last or 0, n_star or 0) < floor:
        said.append(f"cores.initial {floor} is the floor")
    return StartSize(cores, f"starts at {_cores(cores)}: " + "; ".join(said), n_star)


def _up(n: int, step: int) -> int:
    return -(-n // step) * step


def _ago(age_s: float) -> str:
    if age_s < 1:
        return "just now"
    if age_s < 120:
        return f"{age_s:.0f} s ago"
    if age_s < 7200:
        return f"{age_s / 60:.0f} min ago"
    return f"{age_s / 3600:.1f} h ago"
