"""`streamops job check STAGE`: run the stage's job once over a sample of its input, as a driver's
warm-up does, and say what the platform will make of it. Prints one JSON object (`JobReport`)
on stdout; the control plane runs this as a process (it never imports driver code).

    python -m spark_apps.job_check --registry apps.yaml --stage app.stage [--sample 400]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamops.jobs import JobError
from streamops.plan.mechanism import repartition_refusal
from streamops.records import check_line
from streamops.registry import RegistryError, Stage, load

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass
class JobReport:
    stage: str
    job: str
    input_schema: str
    sample_lines: int = 0
    quarantined: dict[str, int] = field(default_factory=dict)
    output_schema: list[list[str]] = field(default_factory=list)
    stateful: bool | None = None
    state_operators: list[str] = field(default_factory=list)
    mechanisms: dict[str, str] = field(default_factory=dict)
    error: str | None = None


def mechanisms_for(pool_kind: str, state_operators: list[str]) -> dict[str, str]:
    """Which reconfiguration mechanisms apply to this query, and why not where they do not."""
    out = {m: "applies" for m in ("pause_resume", "prestaged", "active_backup", "migrate")}
    refused = repartition_refusal(tuple(state_operators))
    if not state_operators:
        out["state repartition"] = "not needed: the query keeps no state"
    elif refused:
        out["state repartition"] = f"refused: {refused}"
    else:
        out["state repartition"] = "applies (offline, between stop and restart)"
    if pool_kind == "standalone":
        out["live"] = "applies: executors added and removed while the query runs"
        out["in_driver"] = out["state repartition"] if state_operators else "not needed: the query keeps no state"
    return out


def check(stage_ref: str, registry_path: Path | None, sample: int) -> JobReport:
    try:
        reg = load(registry_path)
        app, name, st = reg.stage(stage_ref)
    except RegistryError as e:
        return JobReport(stage_ref, "?", "", error=f"invalid registry: {e}")
    report = JobReport(f"{app}.{name}", st.job, st.record_schema.ddl)
    try:
        _run(st, reg.pools[st.pool].kind, sample, report)
    except JobError as e:
        report.error = str(e)
    except Exception as e:  # noqa: BLE001 - Spark's own refusal of the query, said in one line
        report.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return report


def _count_batch(df: DataFrame, _batch_id: int) -> None:
    df.count()  # runs the batch; its output is looked at, kept nowhere


def _run(st: Stage, pool_kind: str, sample: int, report: JobReport) -> None:
    from spark_apps.job_runtime import build_output, check_output, ship_code
    from spark_apps.parse import parse_records, read_lines, write_sample
    from spark_apps.stage import build_session, warm_up_sample
    from streamops.jobs import load_callable, package_code

    load_callable(st.job, st.code)  # an import error names the file and line before any JVM starts
    lines = warm_up_sample(st, sample)
    report.sample_lines = len(lines)
    verdicts = [check_line(st.record_schema, ln.encode("utf-8"), st.max_record_bytes) for ln in lines]
    report.quarantined = dict(Counter(v.kind for v in verdicts if v.kind is not None))  # None: valid
    spark = build_session("streamops-job-check", 1, st.state_partitions)
    ship_code(spark, package_code(st.code).archive)  # its Python workers import the job's UDFs too
    tmp = Path(tempfile.mkdtemp(prefix="streamops-job-check-"))
    try:
        write_sample(spark, st.record_schema, lines, tmp / "in")
        records = parse_records(read_lines(spark, st.record_schema, str(tmp / "in"), streaming=True),
                                st.record_schema, st.max_record_bytes)
        output = build_output(st, records.where("reason IS NULL"))
        report.output_schema = [[f.name, f.dataType.simpleString()] for f in output.schema.fields]
        check_output(st, output)
        q = (output.writeStream.outputMode(st.output_mode).foreachBatch(_count_batch)
             .option("checkpointLocation", str(tmp / "ckpt")).trigger(availableNow=True).start())
        q.awaitTermination(300)
        if q.exception() is not None:
            raise RuntimeError(str(q.exception()))
        last: dict[str, Any] = q.lastProgress or {}
        ops = [p.get("operatorName", "?") for p in last.get("stateOperators", [])]
        report.stateful, report.state_operators = bool(ops), ops
        report.mechanisms = mechanisms_for(pool_kind, ops)
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="job_check")
    p.add_argument("--stage", required=True, help="app.stage")
    p.add_argument("--registry", type=Path, help="apps.yaml (default: $STREAMOPS_APPS or the repo's)")
    p.add_argument("--sample", type=int, default=400, help="lines of input to run the job over")
    args = p.parse_args(argv)
    report = check(args.stage, args.registry, args.sample)
    print("JOB_REPORT " + json.dumps(asdict(report)))
    return 0 if report.error is None else 1


if __name__ == "__main__":
    sys.exit(main())
