"""`streamops job new | check`: a team's first job in minutes (docs/jobs.md)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import typer
from rich.table import Table

from streamops.cli.common import console, fail
from streamops.paths import REPO_ROOT, registry_path

app = typer.Typer(help="A team's own job: write a first one, check one before it is deployed.", no_args_is_help=True)

REPORT_PREFIX = "JOB_REPORT "
NAME = re.compile(r"^[a-z_][a-z0-9_]*$")

_JOB = '''"""{name}: a streamops job. `build` gets the stage's valid records (its declared schema, the
watermark set on the event time) and returns the result; streamops owns the rest (docs/jobs.md)."""

from pyspark.sql import functions as F


def build(records, params):
    gap = params.get("gap", "5 minutes")
    sessions = (records.groupBy(F.session_window("ts", gap).alias("s"), "user")
                .agg(F.count(F.lit(1)).alias("clicks"), F.max("ts").alias("last_click")))
    return sessions.select("user", F.col("s.start").alias("session_start"), "clicks", "last_click")
'''

_TEST = '''"""{name}'s build over a few records, on a local Spark: run with pytest."""

from datetime import datetime, timezone

from pyspark.sql import SparkSession

from {name}.job import build


def test_build_counts_clicks_per_session():
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    t = datetime(2026, 1, 1, tzinfo=timezone.utc)
    records = spark.createDataFrame([("u1", "/a", t), ("u1", "/b", t.replace(minute=2)), ("u2", "/a", t)],
                                    "user STRING, url STRING, ts TIMESTAMP")
    got = {{(r.user, r.clicks) for r in build(records, {{"gap": "5 minutes"}}).collect()}}
    assert got == {{("u1", 2), ("u2", 1)}}
'''

_ENTRY = '''# Add under `apps:` in {registry} (and `{code}` to its top-level `code:` list):
  {name}:
    r_max_ms: 10000
    maintenance_window: {{cron: "0 3 * * *", duration_min: 30}}
    stages:
      {name}:
        job: {name}.job:build
        output_mode: append          # session windows emit a session once the watermark passes its end
        source: {{kind: files, path: {name}/in, format: json, schema: "user STRING, url STRING, ts TIMESTAMP",
                 event_time: ts, watermark: 1 minute}}
        sink: {{kind: postgres, key: [user, session_start], version: clicks, event_time: last_click}}
        cores: {{initial: 1, min: 1, max: 2}}
        pool: POOL                   # one of the registry's pools
        params: {{gap: 5 minutes}}
'''


@app.command("new")
def new(name: str = typer.Argument(..., help="the job's package name (lower case, e.g. sessions)"),
        directory: Path = typer.Option(Path("jobs"), "--dir", help="the code directory the registry's `code` names")
        ) -> None:
    """Write a job module, a test for it and its registry entry (a session-window count over JSON
    clicks to start from)."""
    if not NAME.match(name):
        fail(f"{name!r}: a job's name is a Python package name (a-z, 0-9, _)", 2)
    pkg = directory / name
    if pkg.exists():
        fail(f"{pkg} exists; pick another name or remove it", 2)
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "job.py").write_text(_JOB.format(name=name))
    tests = directory / "tests"
    tests.mkdir(exist_ok=True)
    (tests / f"test_{name}.py").write_text(_TEST.format(name=name))
    entry = _ENTRY.format(name=name, registry=registry_path(), code=directory)
    (pkg / "apps.yaml.example").write_text(entry)
    for path in (pkg / "job.py", tests / f"test_{name}.py", pkg / "apps.yaml.example"):
        console.print(f"wrote {path}")
    console.print(entry)
    console.print(f"then: streamops job check {name}.{name}, streamops deploy {name} --start")


def run_check(stage: str, sample: int = 400) -> dict:
    """The job check as a process (the control plane never imports driver code): its report."""
    proc = subprocess.run([sys.executable, "-m", "spark_apps.job_check", "--stage", stage, "--registry",
                           str(registry_path()), "--sample", str(sample)], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=600)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(REPORT_PREFIX)), None)
    if line is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {"stage": stage, "error": "the check did not finish: " + " | ".join(tail)}
    return json.loads(line[len(REPORT_PREFIX):])


def print_report(r: dict) -> None:
    t = Table(title=f"job check: {r['stage']} ({r.get('job', '?')})", show_header=False)
    t.add_row("input schema", r.get("input_schema") or "")
    n = r.get("sample_lines") or 0
    bad = r.get("quarantined") or {}
    share = f"{sum(bad.values())} of {n} sample lines" + (f" ({', '.join(f'{k}: {v}' for k, v in bad.items())})"
                                                          if bad else "")
    t.add_row("quarantined", share)
    t.add_row("output schema", ", ".join(f"{c} {ty}" for c, ty in r.get("output_schema") or []))
    stateful = r.get("stateful")
    t.add_row("stateful", "unknown" if stateful is None else
              f"yes: {', '.join(r.get('state_operators') or [])}" if stateful else "no")
    for mech, why in (r.get("mechanisms") or {}).items():
        t.add_row(f"mechanism {mech}", why)
    console.print(t)
    if r.get("error"):  # whole, not in a cell that cuts it: the file and line are at its end
        typer.echo(f"error: {r['error']}")


@app.command("check")
def check(stage: str = typer.Argument(..., metavar="STAGE", help="app.stage"),
          sample: int = typer.Option(400, help="lines of the stage's input (else synthetic) to run the job over")
          ) -> None:
    """Run the stage's job over a sample of its input, as a driver's warm-up does: the input
    schema, what the sample would quarantine, the output schema, whether the query keeps state,
    the mechanisms that will apply, and any error with the job's file and line."""
    with console.status(f"checking {stage} (a local Spark runs the job over a sample) …"):
        report = run_check(stage, sample)
    print_report(report)
    if report.get("error"):
        raise typer.Exit(1)
