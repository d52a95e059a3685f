"""Reconfiguration mechanisms (POLICIES.md §5): how one granted change is carried out, one
module each, every one a `Mechanism` (execution.py) that owns its rules:

    live           on a standalone cluster: the running driver adds or removes executors
    in_driver      the running driver stops its query at a batch boundary, repartitions the state
                   in its own session and restarts the query (and changes its executors): no new JVM
    pause_resume   stop at a batch boundary, copy the checkpoint for rollback, restart with the
                   new cores/partitions/pool (the new driver repartitions the state offline)
    prestaged      stop, start from a copy staged (and repartitioned) beforehand
    active_backup  start a secondary beside the primary, switch when it has caught up

Each one's pure rule (whether it applies, the outage it costs) is in `plan.mechanisms.RULES`, under
the same name: the cost rule, the simulator, the CLI's help and the DAG forms read that list.
`execute.reconfigure` drives them all the same way and names none of them.
"""

from __future__ import annotations

from streamops.execute.mechanisms.active_backup import ActiveBackup
from streamops.execute.mechanisms.execution import (
    Deadlines,
    Execution,
    Mechanism,
    Recovery,
    Situation,
    source_behind,
    source_of,
    wait_first_batch,
    wait_first_output,
)
from streamops.execute.mechanisms.in_driver import InDriver
from streamops.execute.mechanisms.live import LiveScale
from streamops.execute.mechanisms.pause_resume import PauseResume
from streamops.execute.mechanisms.prestaged import Prestaged
from streamops.plan.mechanisms import RULES

MECHANISMS: dict[str, Mechanism] = {m.name: m for m in (LiveScale(), InDriver(), PauseResume(), Prestaged(),
                                                         ActiveBackup())}
if MECHANISMS.keys() != RULES.keys():  # a rule nothing carries out, or a mechanism no rule offers
    raise ImportError(f"the mechanisms carried out ({', '.join(MECHANISMS)}) are not the ones plan.mechanisms.RULES "
                      f"offers ({', '.join(RULES)})")

__all__ = ["MECHANISMS", "Deadlines", "Execution", "Mechanism", "Recovery", "Situation", "source_behind", "source_of",
           "wait_first_batch", "wait_first_output"]
