"""The names the control plane, the drivers, the CLI, the DAG Params and the database share,
each with one spelling: the value stored in SQL (sql/schema/004_control_loop.sql's CHECKs).
`StrEnum` members compare equal to their strings, so rows read back compare as they are."""

from __future__ import annotations

from enum import StrEnum


class Action(StrEnum):
    """A change of a stage's configuration (`reconfigurations.action`)."""

    SCALE_OUT = "scale_out"
    SCALE_IN = "scale_in"
    MIGRATE = "migrate"
    UPGRADE = "upgrade"  # new code or a new job spec for the running stage; its cores and pool stay

    @classmethod
    def parse(cls, text: str) -> Action:
        """`scale-out` (the CLI's and the forms' older spelling) or `scale_out`: one action."""
        try:
            return cls(text.strip().replace("-", "_"))
        except ValueError:
            raise ValueError(f"action must be one of {', '.join(cls)}, got {text!r}") from None


class MechanismName(StrEnum):
    """How a change is carried out (POLICIES.md §5); AUTO lets the cost rule choose at execution."""

    LIVE = "live"
    IN_DRIVER = "in_driver"
    PAUSE_RESUME = "pause_resume"
    PRESTAGED = "prestaged"
    ACTIVE_BACKUP = "active_backup"
    AUTO = "auto"


class RunStatus(StrEnum):
    """A reconfiguration's status (`reconfigurations.status`)."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Phase(StrEnum):
    """A reconfiguration's phase stamps (`reconfigurations.<phase>_at`)."""

    STOP_REQUESTED = "stop_requested"
    STOPPED = "stopped"
    STATE_READY = "state_ready"
    RESTARTED = "restarted"
    FIRST_BATCH_DONE = "first_batch_done"
    CAUGHT_UP = "caught_up"
    SCALE_REQUESTED = "scale_requested"
    EXECUTORS_READY = "executors_ready"
