"""Progress → stage_metrics row, from progress JSON saved from a real PySpark 4.3 wordcount run."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from streamops.agent.metrics import (
    SinkStats,
    StageContext,
    latency_from_event_times,
    progress_to_metrics,
)
from streamops.checkpoint_layout import Backlog, FileSourceBacklog

FIXTURE = Path(__file__).parents[1] / "fixtures" / "progress_wordcount_batch0.json"
CTX = StageContext("hibench.wordcount", 7, cores=2, state_partitions=4, trigger_interval_ms=2000)


@pytest.fixture
def progress() -> dict:
    return json.loads(FIXTURE.read_text())


def test_maps_every_policy_field(progress):
    sink = SinkStats(0, 3, datetime(2026, 11, 21, tzinfo=UTC), 10.0, 20.0, 30.0)
    row = progress_to_metrics(progress, CTX, sink, Backlog(files=3, rows=900))
    assert row["ts"] == datetime(2026, 11, 21, 20, 41, 45, 388000, tzinfo=UTC)
    assert row["run_id"] == progress["runId"] and row["batch_id"] == 0
    assert row["input_rows"] == 54
    assert row["input_rps"] == 0.0 and row["processed_rps"] == 15.9
    assert row["batch_duration_ms"] == 3394 and row["add_batch_ms"] == 2661
    assert row["trigger_interval_ms"] == 2000
    assert row["state_rows"] == 3 and row["state_bytes"] == 12632
    assert row["quarantined_rows"] == 4, "observed malformed rows are counted"
    assert row["output_rows"] == 3, "the sink's own count replaces foreachBatch's -1"
    assert (row["latency_p50_ms"], row["latency_p95_ms"], row["latency_max_ms"]) == (10.0, 20.0, 30.0)
    assert (row["backlog_files"], row["backlog_rows"]) == (3, 900)
    assert (row["cores"], row["state_partitions"], row["deployment_id"]) == (2, 4, 7)
    assert json.loads(row["durations"])["walCommit"] == 26


def test_stateless_empty_batch_has_no_state_and_no_nan(progress):
    progress = {**progress, "stateOperators": [], "numInputRows": 0,
                "inputRowsPerSecond": float("nan"), "processedRowsPerSecond": float("nan"), "observedMetrics": {}}
    row = progress_to_metrics(progress, CTX)
    assert row["state_rows"] is None and row["state_bytes"] is None
    assert row["input_rps"] is None and row["processed_rps"] is None
    assert row["quarantined_rows"] == 0 and row["output_rows"] is None
    assert row["latency_p95_ms"] is None and row["backlog_files"] is None


def test_latency_percentiles_come_from_event_time_percentiles():
    # Commit at t=10 000 ms; the 5th-percentile event time is the 95th-percentile latency.
    p50, p95, mx = latency_from_event_times(10_000, ets_p05_ms=6_000, ets_p50_ms=9_000, ets_min_ms=1_000)
    assert (p50, p95, mx) == (1_000, 4_000, 9_000)
    assert p50 <= p95 <= mx
    assert latency_from_event_times(10_000, None, None, None) == (None, None, None)


def test_file_source_backlog_counts_files_not_yet_in_the_source_log(tmp_path):
    inputs, log = tmp_path / "in", tmp_path / "ckpt" / "sources" / "0"
    inputs.mkdir()
    log.mkdir(parents=True)
    for i in range(6):
        (inputs / f"part-{i}.json").write_text("{}\n")
    (inputs / "_manifest").mkdir()
    (inputs / ".hidden.tmp").write_text("")
    backlog = FileSourceBacklog(inputs, tmp_path / "ckpt")
    assert backlog.measure().files == 6
    _source_log(log / "0", 0, [inputs / "part-0.json", inputs / "part-1.json"])
    _source_log(log / "1", 1, [inputs / "part-2.json"])
    assert backlog.measure(rows_per_file=100) == Backlog(files=3, rows=300)
    # After compaction the compact file holds everything up to its batch.
    _source_log(log / "2.compact", 2, [inputs / f"part-{i}.json" for i in range(4)])
    assert backlog.measure().files == 2


def _source_log(entry: Path, batch: int, files: list[Path]) -> None:
    """A source log entry as Spark writes it: "v1", then one line per file, its path a file: URI."""
    lines = [json.dumps({"path": f"file://{f}", "timestamp": 0, "batchId": batch}) for f in files]
    entry.write_text("\n".join(["v1", *lines]) + "\n")


def test_file_source_backlog_counts_unread_files_after_read_ones_are_deleted(tmp_path):
    """Retention deletes input files once read: the backlog is the files not in the source log,
    by name, not the visible files minus every file ever read (0 here, and the watchdog never
    saw a wedged driver stall)."""
    inputs, log = tmp_path / "in", tmp_path / "ckpt" / "sources" / "0"
    inputs.mkdir()
    log.mkdir(parents=True)
    files = [inputs / f"part-{i:04d}.json" for i in range(120)]
    for f in files:
        f.write_text("{}\n")
    for batch in range(9):  # 90 read, 10 a batch
        _source_log(log / str(batch), batch, files[10 * batch:10 * batch + 10])
    backlog = FileSourceBacklog(inputs, tmp_path / "ckpt")
    assert backlog.measure().files == 30
    for f in files[:90]:
        f.unlink()
    assert backlog.measure().files == 30
    assert FileSourceBacklog(inputs, tmp_path / "ckpt").measure().files == 30, "a new reader counts the same"


def test_file_source_backlog_reads_names_as_spark_writes_them(tmp_path):
    """Spark logs a file's path URL-encoded (`a b%41.json` as `file:///…/a%20b%2541.json`); a
    compaction read after the batches it repeats gives the same names as one read afresh."""
    inputs, log = tmp_path / "in", tmp_path / "ckpt" / "sources" / "0"
    inputs.mkdir()
    log.mkdir(parents=True)
    odd = inputs / "a b%41.json"
    odd.write_text("{}\n")
    (log / "0").write_text(f'v1\n{{"path":"file://{inputs}/a%20b%2541.json","timestamp":0,"batchId":0}}\n')
    warm = FileSourceBacklog(inputs, tmp_path / "ckpt")
    assert warm.measure().files == 0
    files = [inputs / f"part-{i}.json" for i in range(10)]
    for f in files:
        f.write_text("{}\n")
    for batch in range(1, 9):
        _source_log(log / str(batch), batch, [files[batch - 1]])
    assert warm.measure().files == 2
    entries = [(log / str(b)).read_text().splitlines()[1] for b in range(9)]
    (log / "9.compact").write_text("\n".join(["v1", *entries, json.dumps(
        {"path": f"file://{files[8]}", "timestamp": 0, "batchId": 9})]) + "\n")
    assert warm.measure().files == 1
    assert FileSourceBacklog(inputs, tmp_path / "ckpt").measure().files == 1
    assert warm.seen() == 10


def test_the_clock_offset_comes_from_beats_with_a_short_round_trip():
    """Issue 44 item 14: the driver's wall clock against the database's, from its beats: a beat of
    50 ms dates its middle; one of 2 s (a lock, a stall) says too little and is not used."""
    from datetime import timedelta

    from streamops.agent.metrics import ClockOffset

    clock = ClockOffset()
    t = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)
    assert clock.to_db(t) == t, "no beat yet: the driver's own time"
    sent = t.timestamp() + 120  # the driver 120 s ahead
    clock.observe(t + timedelta(seconds=0.025), sent, sent + 0.05)
    assert clock.offset_s == pytest.approx(-120, abs=1e-6)
    clock.observe(t + timedelta(seconds=10), sent + 20, sent + 22)
    assert clock.offset_s == pytest.approx(-120, abs=1e-6), "a slow beat is not used"
    assert clock.to_db(t + timedelta(seconds=130)) == t + timedelta(seconds=10)
