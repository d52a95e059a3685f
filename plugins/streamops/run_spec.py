"""The typed contract between the control plane and a stage's driver: what one run is, what it
is told while it runs, and what it answers.

`start_stage` writes a `RunSpec` into the run's `deployments.config` and the driver
(spark_apps/run_stage.py) reads it back with `RunSpec.model_validate`, so both sides agree on
every field and its type; a field one side does not know is an error, not a silent default.
Commands (`driver_commands`) carry typed arguments (`COMMANDS`) and close with a
`CommandOutcome`, never with free text parsed by its prefix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from streamops.registry import Pool, Stage


class RunSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    app: str
    stage: str
    spec: Stage = Field(description="the stage as apps.yaml declared it when the run was admitted")
    pool: Pool
    reconfiguration_id: int | None = Field(default=None, description="the reconfiguration this run realizes")
    fault: str | None = Field(default=None, description="a test's sink fault (sink_faults.SINK_FAULTS)")
    speculation: dict[str, str] | None = Field(default=None, description="Spark speculation conf (HA stages)")
    warm_up: bool = Field(default=True, description="run the query once over a sample before the real one")
    operator_manager: bool = Field(default=False, description="whether the driver asks the Operator Manager "
                                                              "(control.request_for_stage) every local period")
    code_archive: str | None = Field(default=None, description="the job's code, zipped, shipped with addPyFile")
    code_sha256: str | None = Field(default=None, description="the content hash of that code")
    checkpoint_repair: str | None = Field(default=None, description="what the start moved aside from a torn "
                                                                    "checkpoint (checkpoint_repair)")
    start_size: str | None = Field(default=None, description="why a new deployment starts at its cores "
                                                             "(plan.start_size); None: the cores were given")

    @field_validator("operator_manager", mode="before")
    @classmethod
    def _named_before(cls, v: object) -> object:
        # Rows written before the driver imported it named it (or None); no other name was ever written.
        return {None: False, "streamops.control:request_for_stage": True}.get(v, v) if isinstance(v, str | None) else v

    @classmethod
    def of(cls, config: dict[str, Any]) -> RunSpec:
        return cls.model_validate(config)


# -- commands to a live run, and their outcomes ---------------------------------------------------
class _Args(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    reconfiguration_id: int | None = Field(default=None, description="the reconfiguration that sent it")


class StopArgs(_Args):
    deadline_s: float | None = Field(default=None, gt=0, description="the caller's deadline; SIGTERM after it")


class ScaleArgs(_Args):
    cores: int = Field(ge=1, description="the run's cores from now on, in whole executors")
    timeout_s: float = Field(default=60, gt=0, description="how long to wait for the executors")


class RepartitionArgs(_Args):
    partitions: int = Field(ge=1, le=1024, description="state partitions after the change")
    cores: int | None = Field(default=None, ge=1, description="cores after the change (default: as now)")
    stop_deadline_s: float = Field(default=30, gt=0, description="how long the stop waits for the running batch")
    timeout_s: float = Field(default=60, gt=0, description="how long to wait for executors")


class FaultArgs(_Args):
    kind: str = Field(description="a fault kind (registry.FAULT_KINDS)")
    magnitude_s: float | None = Field(default=None, ge=0, description="its pause, cut or outage length")
    source: str = Field(default="cli", description="who injects it: cli, schedule, test")


# command → its arguments; a command the driver does not know is refused, never guessed at.
COMMANDS: dict[str, type[_Args]] = {"stop": StopArgs, "scale": ScaleArgs, "repartition": RepartitionArgs,
                                    "fault": FaultArgs}
CommandArgs = StopArgs | ScaleArgs | RepartitionArgs | FaultArgs


class CommandOutcome(BaseModel):
    """What the driver did with a command: `done`, `refused` (it could not apply here, nothing
    changed) or `failed` (it raised). Stored as `status: detail`, which a person reads too."""

    model_config = ConfigDict(frozen=True)
    status: Literal["done", "refused", "failed"]
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "done"

    def __str__(self) -> str:
        return f"{self.status}: {self.detail}" if self.detail else self.status

    @classmethod
    def parse(cls, text: str | None) -> CommandOutcome | None:
        """The stored outcome back as a value; None while the command is open."""
        if text is None:
            return None
        status, _, detail = text.partition(": ")
        if status in ("done", "refused", "failed"):
            return cls(status=status, detail=detail)  # type: ignore[arg-type]
        return cls(status="failed", detail=f"an outcome this platform does not know: {text}")


@dataclass(frozen=True)
class CommandHandlers:
    """What a run does with each command but `stop` (which the agent obeys itself), each handler
    typed by its command's arguments; None: this run refuses that command."""

    scale: Callable[[ScaleArgs], CommandOutcome] | None = None
    repartition: Callable[[RepartitionArgs], CommandOutcome] | None = None
    fault: Callable[[FaultArgs], CommandOutcome] | None = None

    def run(self, args: CommandArgs) -> CommandOutcome | None:
        """The outcome of the handler for `args`'s command; None when this run has none."""
        if isinstance(args, ScaleArgs) and self.scale is not None:
            return self.scale(args)
        if isinstance(args, RepartitionArgs) and self.repartition is not None:
            return self.repartition(args)
        if isinstance(args, FaultArgs) and self.fault is not None:
            return self.fault(args)
        return None


def command_args(command: str, args: dict[str, Any] | None) -> CommandArgs:
    """A stored command's arguments as their type; ValueError for an unknown command or bad args."""
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}; one of {', '.join(COMMANDS)}")
    return COMMANDS[command].model_validate(args or {})  # type: ignore[return-value]
