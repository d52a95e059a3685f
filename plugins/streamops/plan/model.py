"""Plain data passed between monitor, plan and execute."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

SCALE_OUT, SCALE_IN, MIGRATE = "scale_out", "scale_in", "migrate"
PRESTAGE, RELEASE = "prestage", "release_prestage"
RECONFIGURATIONS = (SCALE_OUT, SCALE_IN, MIGRATE)
DISRUPTIVE = (SCALE_IN, MIGRATE)  # deferred to the maintenance window
LOCAL = (PRESTAGE, RELEASE)  # no restart, no token: the Operator Manager's own business
# The redundancy manager's actions on an HA stage (target in snapshot["target_replicas"]). Neither
# stops the output: adding spends a token like a scale-out (it costs cores), removing is free.
ADD_REPLICA, REMOVE_REPLICA = "add_replica", "remove_replica"
REPLICA_ACTIONS = (ADD_REPLICA, REMOVE_REPLICA)


def stage_id(app: str, stage: str) -> str:
    """A stage's id everywhere (requests, deployments, metrics): `app.stage`."""
    return f"{app}.{stage}"


@dataclass(frozen=True)
class Request:
    stage_id: str
    action: str
    target_cores: int | None
    target_pool: str | None
    gain: float
    cost_ms: float
    reason: str
    snapshot: dict[str, Any] = field(default_factory=dict, compare=False)
    app: str = ""
    id: int | None = field(default=None, compare=False)
    made_at: datetime | None = field(default=None, compare=False)  # its Operator Manager's latest word
    first_made_at: datetime | None = field(default=None, compare=False)  # asked for since (refreshed without a break)
    # A scale-in the running stage can take live (executors removed while the query runs, no
    # checkpoint involved: plan.change.live_scale_in): no outage, so no maintenance window.
    live: bool = field(default=False, compare=False)

    @property
    def value(self) -> float:
        """Gain per second of expected downtime: the greedy order of the Application Manager."""
        return self.gain / max(self.cost_ms / 1000.0, 0.001)


@dataclass(frozen=True)
class Decision:
    request: Request
    outcome: str  # granted | declined | deferred
    reason: str
    tokens_before: float
    tokens_after: float
    defer_until: datetime | None = None
    urgent: bool = False


@dataclass(frozen=True)
class OperatorState:
    """What an Operator Manager remembers between its cycles."""

    prestaged: bool = False


@dataclass(frozen=True)
class AppState:
    """What an Application Manager remembers between its cycles (persisted per app)."""

    tokens: float = 1.0
    window_start: datetime | None = None  # the maintenance window the budget below belongs to
    window_actions: int = 0
