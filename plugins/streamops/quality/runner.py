"""Run the data-quality suites with Great Expectations (GX Core 1.x) and store each validation
in `dq_results`, which the nightly report shows.

- `run_suites(day, app=None)`: the nightly run. Per app, its stage_metrics of the day; per
  stage, its sink outputs written that day (PostgreSQL through SQLAlchemy query assets, or the
  Parquet directory through Spark) and a sample of its input files of that day (Spark).
- `gate_new_run(deployment_id, first_batches=N)`: the quick gate after a reconfiguration: the
  new run's first N batches of stage_metrics and the sink outputs they wrote.

GX runs in an ephemeral context (nothing is written to disk, no analytics); query assets are
the named statements `sql/queries/dq_*.sql` with their parameters bound as SQL literals.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import great_expectations as gx
from great_expectations.data_context.types.base import (
    DataContextConfig,
    InMemoryStoreBackendDefaults,
    ProgressBarsConfig,
)
from sqlalchemy import Engine
from sqlalchemy.dialects import postgresql

from streamops.quality import suites
from streamops.store import db

log = logging.getLogger(__name__)

DEFAULT_GATE_BATCHES = 5


@dataclass(frozen=True)
class Result:
    """One validation of a suite against a target, as stored in dq_results."""

    suite: str
    target: str
    app: str | None
    day: date
    success: bool
    statistics: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)   # {"failed": [{expectation, column, observed}]}
    id: int | None = None

    @property
    def failed_expectations(self) -> list[str]:
        return [f["expectation"] for f in self.details.get("failed", [])]


@dataclass(frozen=True)
class GateResult:
    passed: bool
    # {"deployment_id", "stage_id", "first_batches", "sink", "elapsed_s", "results": [...]}
    details: dict[str, Any]
    results: list[Result] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.passed

    @property
    def reason(self) -> str:
        """One line for a rollback reason: which suite failed which expectations."""
        def failed(r: Result) -> str:
            return ", ".join(f["expectation"] + (" " + f["column"] if f.get("column") else "")
                             for f in r.details.get("failed", []))

        bad = [f"{r.suite}: {failed(r)}" for r in self.results if not r.success]
        return "data-quality gate failed: " + "; ".join(bad) if bad else "data-quality gate passed"


# -- GX plumbing ----------------------------------------------------------------------------------

def new_context():
    """An ephemeral GX context: in-memory stores, no analytics, no progress bars, no files."""
    cfg = DataContextConfig(store_backend_defaults=InMemoryStoreBackendDefaults(), analytics_enabled=False,
                            progress_bars=ProgressBarsConfig(globally=False))
    return gx.get_context(mode="ephemeral", project_config=cfg)


def sql_text(name: str, **params: Any) -> str:
    """The named statement with its parameters rendered as SQL literals (GX query assets take a
    plain string that must start with SELECT: the file's leading comment lines are dropped).
    Values are quoted by SQLAlchemy's PostgreSQL dialect; pass str/int."""
    stmt = db.query(name).bindparams(**params)
    sql = str(stmt.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))
    return "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--")).strip()


class Validator:
    """One GX context and one PostgreSQL data source for a run of several validations."""

    def __init__(self, engine: Engine | None = None) -> None:
        self.context = new_context()
        self.pg = self.context.data_sources.add_postgres("streamops", connection_string=db.connection_url(engine))
        self._spark: Any = None  # the Spark data source, added on first use
        self._n = 0

    def close(self) -> None:
        """Dispose of the engine GX built for the data source (a long-lived process gates many runs)."""
        with contextlib.suppress(Exception):  # nothing was connected
            self.pg.get_execution_engine().engine.dispose()

    def __enter__(self) -> Validator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _name(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{self._n}"

    def validate_query(self, sql: str, suite) -> Any:
        """Validate the rows of `sql` (a query asset, whole table as one batch) against `suite`."""
        asset = self.pg.add_query_asset(self._name("q"), query=sql)
        batch = asset.add_batch_definition_whole_table("all").get_batch()
        return batch.validate(suite, result_format="SUMMARY")

    def validate_dataframe(self, df, suite) -> Any:
        """Validate a Spark DataFrame (a dataframe asset of an `add_spark` data source)."""
        if self._spark is None:
            self._spark = self.context.data_sources.add_spark("spark")
        asset = self._spark.add_dataframe_asset(self._name("df"))
        batch = asset.add_batch_definition_whole_dataframe("all").get_batch(batch_parameters={"dataframe": df})
        return batch.validate(suite, result_format="SUMMARY")


def _observed(r) -> str:
    res = r.result or {}
    if r.exception_info and r.exception_info.get("raised_exception"):
        return "error: " + str(r.exception_info.get("exception_message", ""))[:200]
    if res.get("unexpected_count") is not None:
        sample = ", ".join(map(str, (res.get("partial_unexpected_list") or [])[:3]))
        return f"{res['unexpected_count']} of {res.get('element_count')} rows" + (f", e.g. {sample}" if sample else "")
    if "observed_value" in res:
        return f"observed {res['observed_value']}"
    return ""


def _column(kwargs: dict) -> str | None:
    if kwargs.get("column"):
        return kwargs["column"]
    if kwargs.get("column_A"):
        return f"{kwargs['column_A']} {'>=' if kwargs.get('or_equal') else '>'} {kwargs['column_B']}"
    if kwargs.get("column_list"):
        return ", ".join(kwargs["column_list"])
    return None


def to_result(validation, suite: str, target: str, app: str | None, day: date) -> Result:
    """GX's ExpectationSuiteValidationResult → the dq_results row shape (009_reports.sql)."""
    failed = []
    for r in validation.results:
        if r.success:
            continue
        cfg = r.expectation_config
        failed.append({"expectation": cfg.type, "column": _column(cfg.kwargs), "observed": _observed(r)})
    stats = {k: v for k, v in dict(validation.statistics).items() if v is not None}
    return Result(suite, target, app, day, bool(validation.success), stats, {"failed": failed} if failed else {})


def _error_result(suite: str, target: str, app: str | None, day: date, e: Exception) -> Result:
    """A validation that could not run (unreadable files, SQL error) is a failure, recorded as such."""
    return Result(suite, target, app, day, False, {"evaluated_expectations": 0},
                  {"failed": [{"expectation": "validation_error", "column": None,
                               "observed": f"{type(e).__name__}: {str(e)[:300]}"}]})


def store(results: list[Result], engine: Engine | None = None) -> list[Result]:
    out = []
    with db.transaction(engine) as conn:
        for r in results:
            row = conn.execute(db.query("dq_result_insert"), {
                "suite": r.suite, "target": r.target, "app": r.app, "day": r.day, "success": r.success,
                "statistics": json.dumps(r.statistics, default=str), "details": json.dumps(r.details, default=str),
            }).one()
            out.append(Result(**{**asdict(r), "id": row.id}))
    return out


# -- the nightly suites ---------------------------------------------------------------------------

def day_bounds(day: date) -> tuple[datetime, datetime]:
    """The UTC day, for file modification times (the SQL suites use the server's TimeZone days,
    UTC on the embedded cluster)."""
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return start, start + timedelta(days=1)


def targets(day: date, app: str | None, engine: Engine | None = None) -> list[dict]:
    """The stages (with their spec) that have metrics or outputs on `day`, of `app` or every app."""
    with db.connection(engine) as conn:
        return [dict(r._mapping) for r in conn.execute(db.query("dq_targets"), {"day": day, "app": app})]


def guard(suite: str, target: str, app: str | None, day: date, fn) -> Result:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - a broken target must not hide the others' results
        log.exception("data quality: %s on %s could not run", suite, target)
        return _error_result(suite, target, app, day, e)


def run_suites(day: date, app: str | None = None, *, engine: Engine | None = None,
               files: bool = True, max_files: int = 200) -> list[Result]:
    """Validate `day` (for `app`, or every app) and store every result in dq_results.

    - stage_metrics: one validation per app (target `stage_metrics:<app>`) of the day's rows;
    - sink_outputs: per stage with a PostgreSQL sink, the rows written that day (target: stage id);
      per stage with a Parquet sink, its directory's files of that day, through Spark (target: path);
    - input_records: per stage with a file source, up to `max_files` of its input files published
      that day (evenly spread), through Spark (target: `<stage id>:<input dir>`).
    `files=False` skips the two Spark suites (a job of their own: `spark_apps/quality_files.py`)."""
    found = targets(day, app, engine)
    with Validator(engine) as v:
        results = _validate_day(v, found, day)
    stored = store(results, engine)
    if files:
        stored += _file_suites(found, day, app, max_files, engine)
    log.info("data quality %s: %d validations, %d failed", day, len(stored), sum(not r.success for r in stored))
    return stored


def _validate_day(v: Validator, found: list[dict], day: date) -> list[Result]:
    results: list[Result] = []
    for a in sorted({t["app"] for t in found if t["has_metrics"]}):
        results.append(guard(suites.STAGE_METRICS, f"stage_metrics:{a}", a, day, lambda a=a: to_result(
            v.validate_query(sql_text("dq_stage_metrics_day", day=day.isoformat(), app=a),
                             suites.stage_metrics_suite()),
            suites.STAGE_METRICS, f"stage_metrics:{a}", a, day)))
    for t in found:
        sink = (t["spec"] or {}).get("sink") or {"kind": "postgres"}
        if sink.get("kind", "postgres") == "postgres" and t["has_outputs"]:
            results.append(guard(suites.SINK_OUTPUTS, t["stage_id"], t["app"], day, lambda t=t: to_result(
                v.validate_query(sql_text("dq_sink_outputs_day", day=day.isoformat(), stage_id=t["stage_id"]),
                                 suites.sink_outputs_suite()),
                suites.SINK_OUTPUTS, t["stage_id"], t["app"], day)))
    return results


def files_between(directory: Path, start: datetime, end: datetime, max_files: int | None,
                  pattern: str = "part-*.json") -> list[Path]:
    """Files under `directory` matching `pattern` last modified (published) in [start, end), in
    name order; at most `max_files`, evenly spread over them (a day of input can be millions of rows)."""
    if not Path(directory).is_dir():
        return []
    lo, hi = start.timestamp(), end.timestamp()
    files = sorted(p for p in Path(directory).glob(pattern) if lo <= p.stat().st_mtime < hi)
    if max_files and len(files) > max_files:
        step = len(files) / max_files
        files = [files[int(i * step)] for i in range(max_files)]
    return files


@dataclass(frozen=True)
class FileWork:
    """One file-based validation: `suite` on `files` (under `directory`) for `target`."""
    suite: str
    target: str
    app: str
    source: dict  # the stage's source spec: its schema, format and event time
    directory: Path
    files: list[Path]


def file_work(found: list[dict], day: date, max_files: int) -> list[FileWork]:
    """The file-based validations of `day`: input_records per stage with a file source (up to
    `max_files` of the files it published that day, evenly spread), sink_outputs_parquet per
    Parquet sink (that day's batch files). Stages without files that day have none."""
    from streamops.registry import resolve_path

    start, end = day_bounds(day)
    work = []
    for t in found:
        spec = t["spec"] or {}
        src, sink = spec.get("source") or {}, spec.get("sink") or {}
        if src.get("kind", "files") == "files" and src.get("path"):
            d = resolve_path(src["path"])
            picked = files_between(d, start, end, max_files)
            if picked:
                work.append(FileWork(suites.INPUT_RECORDS, f"{t['stage_id']}:{d}", t["app"], src, d, picked))
        if sink.get("kind") == "parquet" and sink.get("path"):
            d = resolve_path(sink["path"])
            picked = files_between(d, start, end, None, pattern="batch_id=*/*.parquet")
            if picked:
                work.append(FileWork(suites.SINK_PARQUET, str(d), t["app"], src, d, picked))
    return work


def _file_suites(found: list[dict], day: date, app: str | None, max_files: int,
                 engine: Engine | None) -> list[Result]:
    """The suites that need Spark, in `spark_apps/quality_files.py` as a process of its own (the
    control plane imports no Spark); it stores its results and prints them. Started only when
    there are files to validate. A job that fails is one failed result."""
    from streamops.paths import REPO_ROOT

    if not file_work(found, day, max_files):
        return []
    argv = [sys.executable, str(REPO_ROOT / "spark_apps" / "quality_files.py"), "--day", day.isoformat(),
            "--max-files", str(max_files)] + (["--app", app] if app else [])
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "STREAMOPS_DATABASE_URL": db.connection_url(engine)}
    res = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=str(REPO_ROOT))
    out = []
    for line in res.stdout.splitlines():
        if line.startswith("RESULT "):
            d = json.loads(line.removeprefix("RESULT "))
            out.append(Result(**{**d, "day": date.fromisoformat(d["day"])}))
    if res.returncode != 0:
        tail = (res.stderr.strip().splitlines() or ["no output"])[-1]
        log.error("data quality: the Spark file suites failed (exit %d): %s", res.returncode, tail)
        out += store([_error_result(suites.INPUT_RECORDS, "spark_apps/quality_files.py", app, day,
                                    RuntimeError(f"exit {res.returncode}: {tail}"))], engine)
    return out


# -- the gate after a reconfiguration -------------------------------------------------------------

def gate_new_run(deployment_id: int, first_batches: int = DEFAULT_GATE_BATCHES, *, since: datetime | None = None,
                 engine: Engine | None = None, record: bool = True) -> GateResult:
    """Validate a new run's first `first_batches` batches: its stage_metrics rows (suite
    stage_metrics, plus at least one row) and the sink outputs those batches wrote (suite
    sink_outputs, on the `sink_outputs` rows the run has written so far: a run that starts
    behind overwrites its first batches' keys within seconds). About 0.3 s (1 s for the first GX
    validation in a process): two small queries and their GX checks.

    It is the `gate` the CLI and the Airflow tasks pass to `execute.reconfigure.execute`, which
    calls it once the new run has caught up (and its first batches' metrics are written), before
    the reconfiguration is declared done; a failed gate rolls back with `reason`.

    `since`: the change was made in the running driver (live, in_driver) at that time: judge the
    run's first batches after it, which the change produced, not the run's first batches overall.

    `details` carries every failed expectation; with `record` the two validations are also
    stored in dq_results (suites gate_stage_metrics / gate_sink_outputs, target
    `<stage id>#<deployment id>`, day = today), so the report shows why a run was rolled back.
    A stage with a Parquet sink is gated on its metrics only (reading Parquet needs Spark,
    which the control plane does not start); the nightly suite checks its files. The gate fails
    closed: a deployment that does not exist, or a validation that cannot run (a SQL error),
    fails it."""
    started = time.monotonic()
    with db.connection(engine) as conn:
        dep = conn.execute(db.query("dq_deployment"), {"deployment_id": deployment_id}).first()
    if dep is None:
        return GateResult(False, {"deployment_id": deployment_id, "error": "no such deployment"})
    today = datetime.now(UTC).date()
    with Validator(engine) as v:
        results = _gate_validations(v, dep, deployment_id, first_batches, today, since)
    if record:
        results = store(results, engine)
    passed = all(r.success for r in results)
    details = {"deployment_id": deployment_id, "stage_id": dep.stage_id, "first_batches": first_batches,
               "sink": (dep.sink or {}).get("kind", "postgres"), "elapsed_s": round(time.monotonic() - started, 3),
               "results": [{"suite": r.suite, "success": r.success, "statistics": r.statistics, **r.details}
                           for r in results]}
    log.info("gate for deployment %d (%s): %s in %.2fs", deployment_id, dep.stage_id,
             "passed" if passed else "FAILED", details["elapsed_s"])
    return GateResult(passed, details, results)


def _gate_validations(v: Validator, dep, deployment_id: int, first_batches: int, today: date,
                      changed_at: datetime | None) -> list[Result]:
    target = f"{dep.stage_id}#{deployment_id}"
    since = (changed_at or dep.started_at - timedelta(minutes=5)).isoformat()
    results = [guard(suites.GATE_STAGE_METRICS, target, dep.app, today, lambda: to_result(
        v.validate_query(sql_text("dq_stage_metrics_deployment", deployment_id=deployment_id, stage_id=dep.stage_id,
                                  since=since, n=first_batches),
                         suites.stage_metrics_suite(suites.GATE_STAGE_METRICS, min_rows=1)),
        suites.GATE_STAGE_METRICS, target, dep.app, today))]
    sink_kind = (dep.sink or {}).get("kind", "postgres")
    if sink_kind == "postgres":
        results.append(guard(suites.GATE_SINK_OUTPUTS, target, dep.app, today, lambda: to_result(
            v.validate_query(sql_text("dq_sink_outputs_batches", deployment_id=deployment_id, stage_id=dep.stage_id,
                                      since=since),
                             suites.sink_outputs_suite(suites.GATE_SINK_OUTPUTS)),
            suites.GATE_SINK_OUTPUTS, target, dep.app, today)))
    return results

