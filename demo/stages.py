"""The demo's jobs (examples/jobs/demo_jobs) as tests and benchmarks declare their stages: a job, its input
schema, event time and watermark, and the sink's key and version, by the name the oracles use
(demo/oracles.py). The platform itself knows none of these names."""

from __future__ import annotations

from typing import Any

from streamops.generator import SCHEMAS
from streamops.paths import REPO_ROOT

EXAMPLES = str(REPO_ROOT / "examples" / "jobs")

# name → (import path, record kind, sink declaration, extra source fields)
_JOBS: dict[str, tuple[str, str, dict[str, Any], dict[str, Any]]] = {
    "identity": ("demo_jobs.web:identity", "web", {"key": ["id"]}, {}),
    "repartition": ("demo_jobs.web:repartition", "web", {"key": ["id"]}, {}),
    "wordcount": ("demo_jobs.web:wordcount", "web", {"key": ["word"], "version": "count"}, {}),
    "keycount": ("demo_jobs.web:keycount", "web", {"key": ["key"], "version": "count"}, {}),
    "fixwindow": ("demo_jobs.web:fixwindow", "web",
                  {"key": ["window_start", "ip"], "version": "count", "event_time": "last_ts"},
                  {"watermark": "2 minutes"}),
    "patterns": ("demo_jobs.patterns:count", "patterns", {"key": ["pattern"], "version": "count"}, {}),
    "taxi_top10": ("demo_jobs.taxi:top_routes", "taxi", {"key": ["window_start", "route"], "version": "count"},
                   {"watermark": "30 minutes"}),
}
KIND = {name: kind for name, (_, kind, _, _) in _JOBS.items()}


def source_of(kind: str) -> dict[str, Any]:
    """The declared input of the generator's record `kind`."""
    schema = SCHEMAS[kind]
    src: dict[str, Any] = {"schema": schema.ddl, "event_time": "ts"}
    if schema.ranges:
        src["ranges"] = {n: [lo, hi] for n, lo, hi in schema.ranges}
    return src


def demo_job(name: str, source: dict[str, Any] | None = None, **sink: Any) -> dict[str, Any]:
    """The stage fields of demo job `name`: `source` is the test's (kind, path, ...), completed
    with the schema; `sink` overrides the sink declaration (e.g. kind="parquet", path=...)."""
    job, kind, sink_decl, extra = _JOBS[name]
    return {"job": job, "code": [EXAMPLES],
            "source": {"kind": "files", **source_of(kind), **extra, **(source or {})},
            "sink": sink or {"kind": "postgres", **sink_decl}}
