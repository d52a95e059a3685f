"""Every workload on real Spark (in-process, one session), checked against a Python oracle;
quarantine of malformed records; idempotent sinks."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from demo import oracles
from demo.stages import demo_job
from spark_apps.stage import start_stage_queries
from streamops import generator, registry
from streamops.agent.agent import StageAgent
from streamops.agent.metrics import StageContext
from streamops.agent.sinks import ParquetSink, PostgresUpsertSink

pytestmark = pytest.mark.db

START = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def _stage(workload: str, path: str, **extra) -> registry.Stage:
    return registry.Stage.model_validate({
        **demo_job(workload, {"kind": "files", "path": path, "max_files_per_trigger": 4}),
        "cores": {"initial": 1, "max": 2}, "state_partitions": 2, "pool": "p", **extra,
    })


def run_to_completion(spark, engine, stage, sid, tmp_path, with_agent=False):
    """Drain the stage's input with an availableNow trigger, as one stage run would."""
    inputs = registry.resolve_path(stage.source.path)
    ckpt = tmp_path / "ckpt" / sid
    ctx = StageContext(sid, None, 2, stage.state_partitions, stage.trigger_interval_ms)
    agent = StageAgent(spark, ctx, inputs, ckpt, engine) if with_agent else None
    if agent:
        agent.attach()
    try:
        queries = start_stage_queries(spark, stage, ctx, inputs, ckpt,
                                      on_commit=agent.on_commit if agent else None, available_now=True)
        for q in queries:
            q.awaitTermination(180)
            assert q.exception() is None, q.exception()
    finally:
        if agent:
            _wait_for(lambda: agent.writer.inbox.empty() and not agent.writer.pending, 10)
            time.sleep(1.0)  # the listener bus delivers the last progress event asynchronously
            agent.detach()


def _wait_for(cond, timeout_s):
    deadline = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.1)


@pytest.mark.parametrize("workload,kind,params", [
    ("identity", "web", {}),
    ("repartition", "web", {"partitions": 3}),
    ("wordcount", "web", {}),
    ("fixwindow", "web", {}),
    ("taxi_top10", "taxi", {"window_min": 30, "slide_min": 5}),
    ("patterns", "patterns", {}),
    ("keycount", "web", {}),
])
def test_workload_output_equals_oracle(spark, clean_db, tmp_path, workload, kind, params):
    path = f"in-{workload}"
    summary = generator.generate(registry.resolve_path(path), kind, "constant:rate=120", seed=7,
                                 duration_s=12, realtime=False, start=START)
    stage = _stage(workload, path, params=params)
    sid = f"t.{workload}"
    run_to_completion(spark, clean_db, stage, sid, tmp_path)
    want = oracles.expected(workload, generator.read_valid_records(registry.resolve_path(path)), params)
    got = oracles.actual(clean_db, sid, workload)
    assert summary.valid > 1000
    assert got == want


def test_malformed_records_are_quarantined_and_valid_rows_all_counted(spark, clean_db, tmp_path):
    path = "in-garbage"
    inputs = registry.resolve_path(path)
    summary = generator.generate(inputs, "web", "constant:rate=200", seed=11, duration_s=15,
                                 garbage_fraction=0.01, realtime=False, start=START)
    assert summary.garbage > 10
    stage = _stage("wordcount", path)
    sid = "t.garbage"
    run_to_completion(spark, clean_db, stage, sid, tmp_path, with_agent=True)

    assert oracles.actual(clean_db, sid, "wordcount") == \
        oracles.expected("wordcount", generator.read_valid_records(inputs))
    garbage_ids = {i for m in generator.read_manifest(inputs) for i in m["garbage_ids"]}
    with clean_db.connect() as conn:
        rows = conn.execute(text("SELECT raw, reason FROM quarantine WHERE stage_id = :s"), {"s": sid}).all()
        counted = conn.execute(text(
            "SELECT sum(quarantined_rows), sum(input_rows) FROM stage_metrics WHERE stage_id = :s"), {"s": sid}).one()
    assert len(rows) == summary.garbage == len(garbage_ids)
    assert all(any(f'"{i}"' in r.raw for i in garbage_ids) for r in rows)
    assert {r.reason.split(" ")[0] for r in rows} <= {"malformed", "missing", "wrong"}
    assert all(r.reason for r in rows)
    assert counted == (summary.garbage, summary.rows), "the stage's metrics count the malformed rows it saw"

    # The quarantine query triggers 5 times less often, so it takes 5 times the files per batch:
    # it keeps pace with the main query instead of falling further behind with every batch.
    from spark_apps.stage import QUARANTINE_TRIGGER_FACTOR
    from streamops.checkpoint_layout import last_committed_batch, query_checkpoint

    batches = {q: last_committed_batch(query_checkpoint(q, tmp_path / "ckpt" / sid)) + 1
               for q in ("main", "quarantine")}
    assert batches["main"] >= 3, batches
    assert batches["quarantine"] == -(-batches["main"] // QUARANTINE_TRIGGER_FACTOR), batches


def _batch(spark, rows):
    return spark.createDataFrame(rows, "key string, value string, event_ts timestamp, version double")


def test_postgres_sink_replay_never_duplicates_and_newer_version_wins(spark, clean_db):
    sink = PostgresUpsertSink("t.sink", None)
    ts = datetime(2026, 11, 21, 12, 0)
    batch = _batch(spark, [(f"k{i}", f'{{"n": {i}}}', ts, float(i)) for i in range(500)])
    sink(batch, 3)
    sink(batch, 3)  # replay of the same batch
    stale = _batch(spark, [("k10", '{"n": -1}', ts, 1.0)])
    sink(stale, 4)
    newer = _batch(spark, [("k10", '{"n": 99}', ts, 99.0)])
    sink(newer, 5)
    with clean_db.connect() as conn:
        n, distinct = conn.execute(text(
            "SELECT count(*), count(DISTINCT key) FROM sink_outputs WHERE stage_id = 't.sink'")).one()
        k10 = conn.execute(text("SELECT value->>'n' FROM sink_outputs "
                                "WHERE stage_id='t.sink' AND key='k10'")).scalar_one()
        commits = conn.execute(text("SELECT count(*) FROM sink_commits WHERE stage_id = 't.sink'")).scalar_one()
    assert n == distinct == 500
    assert k10 == "99"
    assert commits == 3, "one commit record per batch id; the replay adds none"


def test_parquet_sink_replay_overwrites_the_batch(spark, clean_db, tmp_path):
    sink = ParquetSink(str(tmp_path / "out"), "t.parquet", None)
    batch = _batch(spark, [(f"k{i}", "{}", datetime(2026, 11, 21), 0.0) for i in range(100)])
    sink(batch, 0)
    sink(batch, 0)
    assert spark.read.parquet(str(tmp_path / "out")).count() == 100


# csv lines take the text path json takes (their parse is tests/unit/test_input_contract.py's):
# make test runs parquet, whose rows take a path of their own.
@pytest.mark.parametrize("fmt", [pytest.param("csv", marks=pytest.mark.slow), "parquet"])
def test_a_csv_or_parquet_source_gets_the_same_contract(spark, clean_db, tmp_path, fmt):
    """Declared input in other formats (issue 43 item 2): valid rows reach the job, the others go
    to quarantine with their reason, by the same check_line."""
    path = f"in-{fmt}"
    inputs = registry.resolve_path(path)
    inputs.mkdir(parents=True)
    schema = "user STRING, n BIGINT, ts TIMESTAMP"
    rows = [("u1", 3, "2026-01-01T00:00:00Z"), ("u2", 99, "2026-01-01T00:00:01Z"), ("u3", None, "2026-01-01T00:00:02Z"),
            ("u4", 4, "2026-01-01T00:00:03Z")]
    if fmt == "csv":
        (inputs / "part-0.csv").write_text("".join(f"{u},{'' if n is None else n},{t}\n" for u, n, t in rows)
                                           + "u5,not a number,2026-01-01T00:00:04Z\n")
    else:
        spark.createDataFrame([(u, n, datetime.fromisoformat(t)) for u, n, t in rows], schema) \
            .coalesce(1).write.parquet(str(tmp_path / "pq"))
        for part in (tmp_path / "pq").glob("*.parquet"):
            part.rename(inputs / part.name)
    stage = registry.Stage.model_validate({
        "job": "demo_jobs.web:identity", "code": demo_job("identity")["code"], "pool": "p",
        "cores": {"initial": 1, "max": 2}, "state_partitions": 2,
        "source": {"path": path, "format": fmt, "schema": schema, "ranges": {"n": [0, 10]}, "event_time": "ts"},
        "sink": {"kind": "postgres", "key": ["user"]}})
    sid = f"t.{fmt}"
    run_to_completion(spark, clean_db, stage, sid, tmp_path)
    with clean_db.connect() as conn:
        got = {v["user"]: v["n"] for (v,) in conn.execute(text("SELECT value FROM sink_outputs WHERE stage_id = :s"),
                                                         {"s": sid})}
        bad = dict(conn.execute(text("SELECT reason_kind, count(*) FROM quarantine WHERE stage_id = :s GROUP BY 1"),
                                {"s": sid}).all())
    assert got == {"u1": 3, "u4": 4}
    want_bad = {"out of range": 1, "missing field": 1} | ({"wrong type": 1} if fmt == "csv" else {})
    assert bad == want_bad, bad
