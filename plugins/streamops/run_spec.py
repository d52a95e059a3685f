"""The typed contract between the control plane and a stage's driver: what one run is.

`start_stage` writes a `RunSpec` into the run's `deployments.config` and the driver
(spark_apps/run_stage.py) reads it back with `RunSpec.model_validate`, so both sides agree on
every field and its type; a field one side does not know is an error, not a silent default.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from streamops.registry import Pool, Stage


class RunSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    app: str
    stage: str
    spec: Stage = Field(description="the stage as apps.yaml declared it when the run was admitted")
    pool: Pool
    reconfiguration_id: int | None = Field(default=None, description="the reconfiguration this run realizes")
    fault: str | None = Field(default=None, description="a test's sink fault (stage.SINK_FAULTS)")
    speculation: dict[str, str] | None = Field(default=None, description="Spark speculation conf (HA stages)")
    warm_up: bool = Field(default=True, description="run the query once over a sample before the real one")
    operator_manager: str | None = Field(default=None, description="module:function the driver asks every period")
    code_archive: str | None = Field(default=None, description="the job's code, zipped, shipped with addPyFile")
    code_sha256: str | None = Field(default=None, description="the content hash of that code")
    checkpoint_repair: str | None = Field(default=None, description="what the start moved aside from a torn "
                                                                    "checkpoint (checkpoint_repair)")

    @classmethod
    def of(cls, config: dict[str, Any]) -> RunSpec:
        return cls.model_validate(config)
