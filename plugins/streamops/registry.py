"""`apps.yaml` → frozen, validated models of pools, apps and stages.

Every error names the app, the stage and the field, and says what was expected, e.g.
`app 'taxi', stage 'top10', field 'cores.min': Input should be greater than or equal to 1 (got 0)`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from croniter import croniter
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    field_validator,
    model_validator,
)

from streamops.paths import data_dir, registry_path
from streamops.plan.model import stage_id as stage_id  # defined with the plan's plain data, used as registry.stage_id
from streamops.plan.operator import POLICIES
from streamops.plan.options import AppOptions, OperatorOptions
from streamops.plan.redundancy import RedundancyOptions
from streamops.records import RecordSchema
from streamops.registry_errors import validation_problems, without_what_failed
from streamops.sources import FileSource, KafkaSource

# A job or a sink function: `package.module:function`, imported from the stage's code paths.
IMPORT_PATH = r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$"
IMPORT_PATH_RULE = "expected an import path 'package.module:function'"


_O = TypeVar("_O")
_M = TypeVar("_M", bound=BaseModel)


def _parsed(cls: type[_O]) -> Callable[[Any], _O]:
    """apps.yaml's (or a stored spec's) override dict → the typed options, parsed once, here."""
    return lambda v: v if isinstance(v, cls) else cls.from_params(v)  # type: ignore[attr-defined]


def _overrides(opts: Any) -> dict[str, Any]:
    """What differs from the defaults: the shape apps.yaml writes and the stored specs keep."""
    base = type(opts)()
    return {f.name: getattr(opts, f.name) for f in fields(opts) if getattr(opts, f.name) != getattr(base, f.name)}


# Typed once at load; dumped back as the overrides, so a stored spec reads as apps.yaml does.
OperatorParams = Annotated[OperatorOptions, BeforeValidator(_parsed(OperatorOptions)), PlainSerializer(_overrides)]
RedundancyParams = Annotated[RedundancyOptions, BeforeValidator(_parsed(RedundancyOptions)),
                             PlainSerializer(_overrides)]
AppParams = Annotated[AppOptions, BeforeValidator(_parsed(AppOptions)), PlainSerializer(_overrides)]


class RegistryError(ValueError):
    """apps.yaml is unreadable or invalid; the message lists every problem, one per line."""


def _import_path(v: str) -> str:
    if not re.match(IMPORT_PATH, v):
        raise ValueError(f"{IMPORT_PATH_RULE}, e.g. 'my_team.sessions:build'")
    return v


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Pool(_Frozen):
    master: str = Field(default="local", description=(
        "`local`: each stage's driver runs local[cores]; `embedded`: the embedded Spark standalone "
        "cluster (`streamops spark up`, or $STREAMOPS_SPARK_MASTER); `spark://host:port`: that cluster"))
    cores: int = Field(ge=1, description="cores the pool lends to stages (on a cluster: executor cores)")
    executor_cores: int = Field(default=1, ge=1, description="cores per executor (standalone pools)")
    executor_memory: str = Field(default="1g", pattern=r"^\d+[kmgt]?$", description="memory per executor")
    network_delay_ms: dict[str, float] = Field(default_factory=dict)
    spark_ui: bool = Field(default=True, description=(
        "each driver serves its Spark UI on a loopback port its launcher chooses (deployments.ui_url); "
        "false: no UI (docs/architecture.md, \"The driver's Spark UI\", gives its cost)"))

    @field_validator("master")
    @classmethod
    def _known_master(cls, v: str) -> str:
        if v == "local" or v == "embedded" or v.startswith(("local[", "spark://")):
            return v
        raise ValueError(f"expected local, embedded or spark://host:port, got {v!r}")

    @property
    def kind(self) -> Literal["local", "standalone"]:
        return "local" if self.master.startswith("local") else "standalone"

    @property
    def max_executors(self) -> int:
        return self.cores // self.executor_cores


class MaintenanceWindow(_Frozen):
    cron: str = Field(description="when the window opens, a cron expression in UTC")
    duration_min: int = Field(gt=0, le=24 * 60)
    max_actions: int = Field(default=2, ge=0, description="disruptive actions allowed per window")

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, v: str) -> str:
        if not croniter.is_valid(v):
            raise ValueError(f"not a cron expression: {v!r} (expected e.g. '0 3 * * *')")
        return v


class Cores(_Frozen):
    initial: int = Field(ge=1)
    min: int = Field(default=1, ge=1)
    max: int = Field(ge=1)
    per_core_rows_s: float | None = Field(default=None, gt=0, description=(
        "rows/s one core of this stage processes (e.g. from a bench run): sizes a start before any run "
        "of the stage was measured (plan.start_size); none: measured from its runs"))

    @model_validator(mode="after")
    def _ordered(self) -> Cores:
        if not self.min <= self.initial <= self.max:
            raise ValueError(f"expected min <= initial <= max, got {self.min} <= {self.initial} <= {self.max}")
        return self


class PostgresSink(_Frozen):
    """`sink_outputs`, upserted per key: the newest version per key wins, so a replayed batch, a
    restart or a second replica never adds a row (docs/jobs.md, "The sink")."""

    kind: Literal["postgres"] = "postgres"
    key: list[str] = Field(default_factory=list, description=(
        "the output columns that identify a result row; none: the whole row is its own key "
        "(an append-only output, where equal rows are one row)"))
    version: str | None = Field(default=None, description=(
        "a numeric output column that grows with each update of a key (a count, an event time), or "
        "`batch_id`: the newest batch wins; none: 0, the first write of a key stays"))
    event_time: str | None = Field(default=None, description=(
        "the output's TIMESTAMP column whose age at commit is the end-to-end latency (default: the "
        "source's event_time, when the output has that column)"))
    table: str | None = Field(default=None, pattern=r"^[a-z_][a-z0-9_]{0,62}$", description=(
        "analysts read the results as sinks.<table>, one typed column per output column (checked "
        "against the job's output on deploy and at every start)"))


class ForeachBatchSink(_Frozen):
    """The team's own sink: `function(df, batch_id, epoch)`; `epoch` is the run's fencing token
    (docs/jobs.md shows how to write idempotently with it)."""

    kind: Literal["foreach_batch"]
    function: str = Field(description="package.module:function, on the stage's code path")

    @field_validator("function")
    @classmethod
    def _function_path(cls, v: str) -> str:
        return _import_path(v)


class ParquetSink(_Frozen):
    kind: Literal["parquet"]
    path: str


class Policy(_Frozen):
    """The stage's Operator Manager policy; `params` override plan.options.OperatorOptions."""

    kind: str = Field(default="threshold3", description="one of plan.operator.POLICIES")
    params: OperatorParams = Field(default_factory=OperatorOptions)

    @field_validator("kind")
    @classmethod
    def _known_policy(cls, v: str) -> str:
        if v not in POLICIES:  # a new policy is known by its entry there alone
            raise ValueError(f"expected one of {', '.join(map(repr, POLICIES))}, got {v!r}")
        return v


FAULT_KINDS = ("slow_batch", "driver_kill", "executor_kill", "heartbeat_cut", "db_outage")
# Kinds whose magnitude is a length of time (a pause, a cut, an outage); kills have none.
TIMED_FAULTS = ("slow_batch", "heartbeat_cut", "db_outage")


class Fault(_Frozen):
    """One kind of fault the injector causes in a stage's driver [002]: arrivals are a Poisson
    process (exponential gaps of mean `mtbf_s`), each with a Gaussian magnitude in seconds."""

    kind: Literal["slow_batch", "driver_kill", "executor_kill", "heartbeat_cut", "db_outage"]
    mtbf_s: float = Field(gt=0, description="mean time between faults of this kind (exponential gaps)")
    magnitude_s: float = Field(default=5.0, ge=0, description="mean pause, cut or outage length (Gaussian)")
    magnitude_sd_s: float = Field(default=1.0, ge=0, description="its standard deviation; draws are cut at 0")
    seed: int | None = Field(default=None, description="fixes the draws, so two runs see the same faults")


class Redundancy(_Frozen):
    """The redundancy manager for an HA stage (plan.redundancy): it moves the replica count
    between 1 and `max_replicas` and Spark's speculation against `bound_ms` (default: R_max)."""

    enabled: bool = Field(default=True, description="false: the manager leaves the stage's replicas alone")
    max_replicas: int = Field(default=2, ge=1, le=4, description="the most replicas it runs the stage with (1-4)")
    bound_ms: int | None = Field(default=None, gt=0, description="tail-latency bound; default the app's r_max_ms")
    period_s: float = Field(default=60.0, gt=0, description="how often it steps, seconds")
    params: RedundancyParams = Field(default_factory=RedundancyOptions, description="overrides of RedundancyOptions")


def _files_by_default(v: Any) -> Any:
    """`source.kind` may be left out: a directory of files is the default source."""
    return {"kind": "files", **v} if isinstance(v, dict) and "kind" not in v else v


class Stage(_Frozen):
    job: str = Field(description=(
        "the team's transform, `package.module:function`: build(records, params) -> DataFrame (docs/jobs.md)"))
    code: list[str] = Field(default_factory=list, description=(
        "directories the job's modules are imported from (default: the registry's `code`); packaged once "
        "per deployment and shipped to every executor"))
    output_mode: Literal["update", "append", "complete"] = Field(default="update", description=(
        "Spark's output mode for the job's result: update (the default) suits aggregations and "
        "stateless jobs; stream-stream joins need append"))
    source: Annotated[FileSource | KafkaSource, BeforeValidator(_files_by_default)] = Field(discriminator="kind")
    sink: PostgresSink | ParquetSink | ForeachBatchSink = Field(default_factory=PostgresSink, discriminator="kind")
    cores: Cores
    state_partitions: int = Field(default=4, ge=1, le=1024)
    trigger_interval_ms: int = Field(default=1000, ge=100)
    pool: str
    policy: Policy = Field(default_factory=Policy)
    params: dict[str, Any] = Field(default_factory=dict, description=(
        "handed to the job's build as its `params`; `cpu_cost` (SHA-256 rounds per record) is the platform's"))
    poison_after_failures: int = Field(
        default=3, ge=0, description="a batch that fails this many times in a row with the same error is "
                                     "bisected by file; the files that fail alone (else all) are quarantined "
                                     "and the stage moves on (0: never; the stage fails instead)")
    replicas: int = Field(default=1, ge=1, le=4, description=(
        "drivers that run the stage at once, each with its own checkpoint, in another pool when one "
        "exists; the sink keeps one result per key whichever writes first"))
    redundancy: Redundancy | None = Field(default=None, description="let the redundancy manager set the replicas")
    faults: list[Fault] = Field(default_factory=list, description="the fault injector's schedule for this stage")

    @field_validator("job")
    @classmethod
    def _job_path(cls, v: str) -> str:
        return _import_path(v)

    @property
    def max_record_bytes(self) -> int:
        return self.source.max_record_bytes

    @property
    def record_schema(self) -> RecordSchema:
        return self.source.record_schema


class App(_Frozen):
    r_max_ms: int = Field(gt=0, description="SLO: end-to-end response-time bound")
    slo_target: float = Field(default=0.99, gt=0, le=1,
                              description="SLO: share of the observed time within R_max (the report's 'SLO met')")
    maintenance_window: MaintenanceWindow
    description: str = ""
    control: AppParams = Field(default_factory=AppOptions, description="overrides of plan.options.AppOptions")
    stages: dict[str, Stage] = Field(min_length=1)


class Registry(_Frozen):
    pools: dict[str, Pool] = Field(min_length=1)
    code: list[str] = Field(default_factory=list, description=(
        "directories the stages' jobs are imported from, relative to the registry file"))
    schemas: dict[str, str] = Field(default_factory=dict, description=(
        "named record schemas (Spark DDL) that a stage's `source.schema` may name"))
    views: list[str] = Field(default_factory=list, description=(
        "SQL files (relative to the registry file) of analyst views over the jobs' outputs, applied into "
        "the `reporting` schema at every sync"))
    apps: dict[str, App] = Field(default_factory=dict)

    def stage(self, ref: str) -> tuple[str, str, Stage]:
        """Resolve `app.stage`, or a bare stage name that is unique across apps."""
        if "." in ref:
            app, name = ref.split(".", 1)
            if app in self.apps and name in self.apps[app].stages:
                return app, name, self.apps[app].stages[name]
        else:
            hits = [(a, ref, app.stages[ref]) for a, app in self.apps.items() if ref in app.stages]
            if len(hits) == 1:
                return hits[0]
            if len(hits) > 1:
                raise RegistryError(f"stage {ref!r} is ambiguous: use one of {[f'{a}.{s}' for a, s, _ in hits]}")
        known = [f"{a}.{s}" for a, app in self.apps.items() for s in app.stages]
        raise RegistryError(f"no stage {ref!r} in the registry; known stages: {', '.join(known) or 'none'}")

    def stages(self) -> list[tuple[str, str, Stage]]:
        return [(a, s, st) for a, app in self.apps.items() for s, st in app.stages.items()]


def resolve_path(p: str) -> Path:
    path = Path(p)
    return path if path.is_absolute() else data_dir() / path


def input_dir(stage: Stage) -> Path | None:
    """A file source's directory; None for a Kafka topic, which has none."""
    return resolve_path(stage.source.path) if isinstance(stage.source, FileSource) else None


# One rule for every name that becomes part of a stage id, a checkpoint path or a replica's role
# suffix: `x.quarantine` or `x@replica-1` as a stage would share another stage's checkpoint.
NAME = re.compile(r"^[A-Za-z0-9_-]{1,63}$")
NAME_RULE = "names are 1-63 letters, digits, '_' or '-' (a stage is referred to as app.stage)"


def _bad_names(reg: Registry, source: str) -> list[str]:
    named = [(f"pool {p!r}", p) for p in reg.pools] + [(f"app {a!r}", a) for a in reg.apps]
    named += [(f"app {a!r}, stage {s!r}", s) for a, s, _ in reg.stages()]
    return [f"{source}: {where}: {NAME_RULE}" for where, name in named if not NAME.match(name)]


PARQUET_ONE_REPLICA = ("a parquet sink runs one replica: its drivers would replace the same batch_id=N "
                      "directories unfenced (use a postgres sink, whose upserts are fenced)")


def _parquet_replicas(reg: Registry, source: str) -> list[str]:
    """A Parquet sink's batch swap is fenced only by its own run's check: two live writers of one
    stage (replicas, or the redundancy manager adding them) could interleave their swaps."""
    problems = []
    for a, s, st in reg.stages():
        if st.sink.kind != "parquet":
            continue
        if st.replicas > 1:
            problems.append(f"{source}: app {a!r}, stage {s!r}, field 'replicas': {PARQUET_ONE_REPLICA}")
        if st.redundancy is not None and st.redundancy.enabled and st.redundancy.max_replicas > 1:
            problems.append(f"{source}: app {a!r}, stage {s!r}, field 'redundancy': {PARQUET_ONE_REPLICA}")
    return problems


def _cross_problems(reg: Registry, source: str) -> list[str]:
    problems = _bad_names(reg, source) + _parquet_replicas(reg, source)
    tables: dict[str, str] = {}
    for a, s, st in reg.stages():
        table = getattr(st.sink, "table", None)
        if table and table in tables:
            problems.append(f"{source}: app {a!r}, stage {s!r}, field 'sink.table': {table!r} is already "
                            f"{tables[table]}'s; one stage per table")
        elif table:
            tables[table] = f"{a}.{s}"
    for a, s, st in reg.stages():
        where = f"{source}: app {a!r}, stage {s!r}"
        if st.pool not in reg.pools:
            problems.append(f"{where}, field 'pool': no pool {st.pool!r}; expected one of {sorted(reg.pools)}")
        elif st.cores.max > reg.pools[st.pool].cores:
            problems.append(
                f"{where}, field 'cores.max': {st.cores.max} exceeds pool {st.pool!r} capacity "
                f"({reg.pools[st.pool].cores} cores)"
            )
        elif reg.pools[st.pool].kind == "standalone" and any(
                c % reg.pools[st.pool].executor_cores for c in (st.cores.min, st.cores.initial, st.cores.max)):
            problems.append(
                f"{where}, field 'cores': on pool {st.pool!r} cores come in executors of "
                f"{reg.pools[st.pool].executor_cores}; min, initial and max must be multiples of it"
            )
    for name, pool in reg.pools.items():
        for other in pool.network_delay_ms:
            if other not in reg.pools:
                problems.append(f"{source}: pool {name!r}, field 'network_delay_ms': no pool {other!r}")
    return problems


def _resolved(data: dict, base: Path | None) -> dict:
    """The registry with what a stage refers to written into the stage itself: a named schema
    becomes its DDL and the registry's `code` (relative to `base`) the stage's absolute code path,
    so a stage's stored spec is the whole of what its driver needs."""
    schemas = data.get("schemas") or {}
    code = data.get("code") or []
    if not isinstance(schemas, dict) or not isinstance(code, list) or not isinstance(data.get("apps") or {}, dict):
        return data  # validation names the field
    here = base or Path.cwd()
    out = {**data, "apps": {}}
    if isinstance(data.get("views"), list):
        out["views"] = [str((here / v).resolve()) if isinstance(v, str) else v for v in data["views"]]
    for a, app in (data.get("apps") or {}).items():
        if not isinstance(app, dict) or not isinstance(app.get("stages"), dict):
            out["apps"][a] = app
            continue
        stages = {}
        for s, st in app["stages"].items():
            if isinstance(st, dict):
                st = dict(st)
                src = st.get("source")
                if isinstance(src, dict) and isinstance(src.get("schema"), str) and src["schema"] in schemas:
                    st["source"] = {**src, "schema": schemas[src["schema"]]}
                paths = st.get("code", code)
                if isinstance(paths, list):
                    st["code"] = [str((here / p).resolve()) if isinstance(p, str) else p for p in paths]
            stages[s] = st
        out["apps"][a] = {**app, "stages": stages}
    return out


def parse(data: Any, source: str = "apps.yaml", base: Path | None = None) -> Registry:
    """Validate a registry; `base` is the directory relative `code` paths are under (the file's)."""
    if not isinstance(data, dict):
        raise RegistryError(f"{source}: top level: expected a mapping with 'pools' and 'apps', "
                            f"got {type(data).__name__}")
    resolved = _resolved(data, base)
    try:
        reg = Registry.model_validate(resolved)
    except ValidationError as e:
        problems = validation_problems(e, source).splitlines()
        rest = without_what_failed(resolved, e)
        if rest is not None:
            # an app without its broken stages may be invalid itself: the first errors stand
            with contextlib.suppress(ValidationError):
                problems += _cross_problems(Registry.model_validate(rest), source)
        raise RegistryError("\n".join(problems)) from None
    problems = _cross_problems(reg, source)
    if problems:
        raise RegistryError("\n".join(problems))
    return reg


def load(path: Path | None = None) -> Registry:
    path = path or registry_path()
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise RegistryError(f"{path}: registry file not found (set STREAMOPS_APPS or create apps.yaml)") from None
    except yaml.YAMLError as e:
        raise RegistryError(f"{path}: not valid YAML: {e}") from None
    return parse(data, path.name, path.resolve().parent)


# The control loop reads options back from the stored spec through these models (defaults once).
@functools.lru_cache(maxsize=4096)
def _stored(model: type[BaseModel], key: str) -> Any:
    return model.model_validate_json(key)


def stored(model: type[_M], data: dict[str, Any] | None) -> _M:
    """A fragment of a stored spec (`policy`, `redundancy`, `maintenance_window`) as `model`."""
    return _stored(model, json.dumps(data or {}, sort_keys=True))


def stored_control(data: dict[str, Any] | None) -> AppOptions:
    return AppOptions.from_params(data)
