"""A real run of one stage, as the database recorded it, for the simulator's calibration
(sim/calibrate.py): its batches (stage_metrics), reconfigurations, output commits and failures
over a time range, and what was measured per second, by the nightly report's definitions.

    run = RunData(**store.runs.stage_run("app.stage", minutes=30))  # or since=/until=
    run.save(Path("run.json")); RunData.load(Path("run.json"))  # offline, without a database
    export_trace(run, Path("bench/traces/x.csv"))          # what sim.traces.load_csv_trace replays
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, overload

import numpy as np

TIME_KEYS = ("ts", "committed_at", "requested_at", "stop_requested_at", "stopped_at", "state_ready_at",
             "restarted_at", "first_batch_done_at", "caught_up_at", "finished_at", "failed_at", "last_commit_at",
             "recovered_at", "first_ts", "last_ts", "started_at", "running_at", "first_commit_at", "at")
TRACE_COLUMNS = ("ts", "stage_id", "deployment_id", "batch_id", "input_rows", "input_rps", "processed_rps",
                 "batch_duration_ms", "add_batch_ms", "trigger_interval_ms", "latency_p50_ms", "latency_p95_ms",
                 "backlog_files", "backlog_rows", "cores", "state_bytes")


def _iso(v: Any) -> Any:
    return v.isoformat() if isinstance(v, datetime) else v


def _dt(v: Any) -> Any:
    if isinstance(v, str):
        d = datetime.fromisoformat(v.replace("Z", "+00:00"))
        return d if d.tzinfo else d.replace(tzinfo=UTC)
    return v


@dataclass
class RunData:
    stage_id: str
    t_from: datetime
    t_to: datetime
    stage: dict[str, Any]
    metrics: list[dict[str, Any]]
    reconfigs: list[dict[str, Any]] = field(default_factory=list)
    commits: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    # what predicts a restart's outage without its own gap (sim/calibrate.restart_cost): the stage's
    # cost history (calibration_cost_history.sql: every change and recovered failure, with its id)
    # and its first deployment's start (calibration_first_start.sql: launch → first commit)
    history: list[dict[str, Any]] = field(default_factory=list)
    first_start: dict[str, Any] | None = None

    # ------------------------------------------------------------------ time axis
    @overload
    def sec(self, ts: datetime) -> float: ...
    @overload
    def sec(self, ts: None) -> None: ...

    def sec(self, ts: datetime | None) -> float | None:
        """Seconds since t_from."""
        return None if ts is None else (ts - self.t_from).total_seconds()

    @property
    def duration_s(self) -> int:
        return max(1, int(math.ceil((self.t_to - self.t_from).total_seconds())))

    @property
    def trigger_ms(self) -> float:
        vals = [m["trigger_interval_ms"] for m in self.metrics if m.get("trigger_interval_ms")]
        return float(np.median(vals)) if vals else float(self.stage.get("trigger_ms") or 1000)

    # ------------------------------------------------------------------ files
    def to_json(self) -> dict[str, Any]:
        def conv(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [{k: _iso(v) for k, v in r.items()} for r in rows]

        d = asdict(self)
        d.update(t_from=_iso(self.t_from), t_to=_iso(self.t_to), stage={k: _iso(v) for k, v in self.stage.items()},
                 metrics=conv(self.metrics), reconfigs=conv(self.reconfigs), commits=conv(self.commits),
                 failures=conv(self.failures), history=conv(self.history),
                 first_start=None if self.first_start is None else conv([self.first_start])[0])
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunData:
        def conv(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [{k: (_dt(v) if k in TIME_KEYS else v) for k, v in r.items()} for r in rows]

        return cls(stage_id=d["stage_id"], t_from=_dt(d["t_from"]), t_to=_dt(d["t_to"]),
                   stage={k: (_dt(v) if k in TIME_KEYS else v) for k, v in d["stage"].items()},
                   metrics=conv(d["metrics"]), reconfigs=conv(d.get("reconfigs", [])),
                   commits=conv(d.get("commits", [])), failures=conv(d.get("failures", [])),
                   history=conv(d.get("history", [])),
                   first_start=conv([d["first_start"]])[0] if d.get("first_start") else None)

    def save(self, path: Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1))
        return path

    @classmethod
    def load(cls, path: Path) -> RunData:
        return cls.from_json(json.loads(Path(path).read_text()))


def export_trace(run: RunData, path: Path) -> Path:
    """The run's batches as a stage_metrics CSV (what sim.traces.load_csv_trace replays)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(TRACE_COLUMNS)
        for m in run.metrics:
            w.writerow([run.stage_id if c == "stage_id" else
                        (m["ts"].astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
                         if c == "ts" else ("" if m.get(c) is None else m.get(c))) for c in TRACE_COLUMNS])
    return path


# ---------------------------------------------------------------------- what was measured
def response_windows(run: RunData) -> dict[int, float]:
    """The stage's response time per 1-second window, as reporting.sla_for_day (10_sla.sql) has it:
    a batch speaks for the windows from the second it started in for its trigger interval (whole
    seconds, rounded up); within a window each run counts with the mean of its batches and the stage
    with its fastest run. Windows without a batch are unmeasured (absent)."""
    per_run: dict[tuple[int, Any], list[float]] = {}
    for m in run.metrics:
        if m.get("latency_p95_ms") is None:
            continue
        sec = int(math.floor(run.sec(m["ts"])))
        hold = min(3600, int(math.ceil((m.get("trigger_interval_ms") or run.trigger_ms) / 1000.0)))
        for w in range(sec, sec + max(1, hold)):
            if 0 <= w < run.duration_s:
                per_run.setdefault((w, m.get("deployment_id")), []).append(float(m["latency_p95_ms"]))
    out: dict[int, float] = {}
    for (w, _), vals in per_run.items():
        v = sum(vals) / len(vals)
        out[w] = min(out.get(w, v), v)
    return dict(sorted(out.items()))


def outage_gaps(run: RunData) -> list[tuple[float, float, str]]:
    """Output gaps (start s, end s, cause) as reporting.downtime_for_day (20_downtime.sql) places
    them: a reconfiguration's downtime_ms ending at its new run's first batch (else its last phase
    stamp); a failure's from its last commit, lasting its measured downtime_ms once recovered."""
    gaps: list[tuple[float, float, str]] = []
    for r in run.reconfigs:
        if (r.get("downtime_ms") or 0) > 0:
            end = next(r[k] for k in ("first_batch_done_at", "caught_up_at", "finished_at", "restarted_at",
                                       "stopped_at", "requested_at") if r.get(k) is not None)
            gaps.append((run.sec(end) - r["downtime_ms"] / 1000.0, run.sec(end), f"reconfiguration {r['id']}"))
    for f in run.failures:
        start = run.sec(f.get("last_commit_at") or f["failed_at"])
        if f.get("recovered_at") is not None and f.get("downtime_ms") is not None:
            end = start + max(0.0, f["downtime_ms"]) / 1000.0
        else:
            end = max(start, run.sec(f.get("recovered_at") or run.t_to))
        gaps.append((start, end, f"failure {f['id']}"))
    return gaps


def union_seconds(gaps: list[tuple[float, float, str]], lo: float, hi: float) -> float:
    """Seconds covered by the gaps within [lo, hi], overlaps counted once."""
    total = 0.0
    cur: tuple[float, float] | None = None  # the union's interval being extended
    for a, b, _ in sorted((max(lo, a), min(hi, b), c) for a, b, c in gaps):
        if b <= a:
            continue
        if cur is None or a > cur[1]:
            total += 0.0 if cur is None else cur[1] - cur[0]
            cur = (a, b)
        else:
            cur = (cur[0], max(cur[1], b))
    return total + (0.0 if cur is None else cur[1] - cur[0])


def availability(run: RunData) -> tuple[float, float]:
    """(availability, downtime s): 1 − output gaps / observed seconds, as the nightly report's."""
    observed = (run.t_to - run.t_from).total_seconds()
    down = union_seconds(outage_gaps(run), 0.0, observed)
    return 1.0 - down / observed, down


def backlog_samples(run: RunData) -> list[tuple[float, float]]:
    """(seconds, rows): the backlog each batch measured when it ended (the agent's files × rows/file)."""
    return [(run.sec(m["ts"]) + (m["batch_duration_ms"] or 0) / 1000.0, float(m["backlog_rows"]))
            for m in run.metrics if m.get("backlog_rows") is not None]


def _next_started_at_once(m: dict[str, Any], trigger_s: float) -> bool:
    """The batch lasted a trigger interval or more: the next one was planned, its files taken,
    before the agent counted the files waiting."""
    return (m["batch_duration_ms"] or 0) / 1000.0 >= trigger_s


def waiting_rows(run: RunData) -> list[float | None]:
    """Per batch, the rows of the files waiting when it ended (None: no count), from the batches
    that took them. The agent counts files × rows per file of the files just taken, wrong when the
    files waiting are of another size (the rate changed while they queued); the files are taken
    oldest first, so a count of F files is the rows of the next F files the run's later batches
    take: a batch after a count of maxFilesPerTrigger files or more takes that many. The count is
    taken after the next batch was planned when that one started at once (the batch lasted a
    trigger interval or more), so its files are not in it. Counts below maxFilesPerTrigger, and
    files beyond the run's last full batch, keep the agent's rows per file."""
    full = int(run.stage.get("max_files_per_trigger") or 0) or 2
    trigger = run.trigger_ms / 1000.0
    ms = run.metrics
    out: list[float | None] = []
    for k, m in enumerate(ms):
        files, rows = m.get("backlog_files") or 0, m.get("backlog_rows")
        if rows is None or files < full:
            out.append(None if rows is None else float(rows))
            continue
        j = k + (2 if _next_started_at_once(m, trigger) else 1)
        need, got, per_file = float(files), 0.0, float(rows) / files
        while need > 0 and j < len(ms) and ms[j].get("deployment_id") == m.get("deployment_id") \
                and (ms[j - 1].get("backlog_files") or 0) >= full and ms[j]["input_rows"]:
            per_file = ms[j]["input_rows"] / full
            take = min(float(full), need)
            got, need, j = got + take * per_file, need - take, j + 1
        out.append(got + need * per_file)
    return out


def arrivals_cumulative(run: RunData) -> tuple[np.ndarray, np.ndarray]:
    """Rows arrived by each batch's end: the rows taken so far (with the next batch's when it started
    at once) plus the rows waiting (`waiting_rows`: the files counted, in rows), from 0 at the
    range's start; (times s, cumulative rows), linear in between. A batch without a row (a gap in
    the batch ids: one a stop cut off) counts with its neighbours' mean rows."""
    waiting, trigger, ms = waiting_rows(run), run.trigger_ms / 1000.0, run.metrics
    ts, cum, taken, top, prev = [0.0], [0.0], 0.0, 0.0, None
    for i, m in enumerate(ms):
        rows = m["input_rows"] or 0
        if prev is not None and m["batch_id"] > prev["batch_id"] + 1:
            taken += (m["batch_id"] - prev["batch_id"] - 1) * 0.5 * (rows + (prev["input_rows"] or 0))
        taken += rows
        prev = m
        nxt = ms[i + 1] if i + 1 < len(ms) else None
        planned = (nxt["input_rows"] or 0) if nxt is not None and nxt["batch_id"] == m["batch_id"] + 1 \
            and _next_started_at_once(m, trigger) else 0
        top = max(top, taken + planned + (waiting[i] or 0.0))
        ts.append(max(ts[-1], run.sec(m["ts"]) + (m["batch_duration_ms"] or 0) / 1000.0))
        cum.append(top)
    return np.array(ts), np.array(cum)
