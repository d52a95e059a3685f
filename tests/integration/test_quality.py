"""Data-quality suites (streamops.quality, Great Expectations 1.x) on real PostgreSQL: good rows
pass; each kind of bad row fails the expectation meant for it; results land in dq_results; the
gate after a reconfiguration passes a good run and fails a bad one, in seconds. The Spark test
validates input JSON-lines files and a Parquet sink (marked e2e)."""

from __future__ import annotations

import json
import random
import time
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from demo.stages import demo_job
from streamops.quality import gate_new_run, run_suites, suites
from streamops.quality.runner import Validator, to_result
from streamops.store import db
from tests.integration.test_reporting_sql import D, add_app, at

pytestmark = pytest.mark.db

STAGE = "a.s"


def add_metrics(engine, rows: list[dict], stage_id: str = STAGE, deployment_id: int | None = None,
                t0: datetime | None = None) -> None:
    """One stage_metrics row per dict, 1 s apart from `t0` (default: 1 h into D); a dict overrides
    the defaults (run r1, batch i, rates 10, p50/p95/max 100/200/300 ms)."""
    t0 = t0 or at(3600)
    with engine.begin() as conn:
        conn.execute(text("SELECT ensure_stage_metrics_partitions(CAST(:d AS date), 1)"), {"d": t0.date()})
        for i, over in enumerate(rows):
            r = {"ts": t0 + timedelta(seconds=i), "stage_id": stage_id, "deployment_id": deployment_id, "run_id": "r1",
                 "batch_id": i, "input_rows": 10, "input_rps": 10.0, "processed_rps": 12.0, "batch_duration_ms": 300,
                 "trigger_interval_ms": 1000, "latency_p50_ms": 100.0, "latency_p95_ms": 200.0,
                 "latency_max_ms": 300.0, **over}
            conn.execute(text(f"INSERT INTO stage_metrics ({', '.join(r)}) "
                              f"VALUES ({', '.join(':' + k for k in r)})"), r)


def add_outputs(engine, counts: dict[str, int], stage_id: str = STAGE, batch_id: int = 0,
                written_at: datetime | None = None) -> None:
    with engine.begin() as conn:
        for key, n in counts.items():
            conn.execute(text(
                "INSERT INTO sink_outputs (stage_id, key, value, version, batch_id, written_at) "
                "VALUES (:s, :k, CAST(:v AS jsonb), :ver, :b, :w)"),
                {"s": stage_id, "k": key, "v": json.dumps({"word": key, "count": n}), "ver": max(n, 0),
                 "b": batch_id, "w": written_at or at(3600)})


@pytest.fixture
def qdb(clean_db):
    with clean_db.begin() as conn:
        assert conn.execute(text("SHOW TimeZone")).scalar_one() == "UTC", "conftest pins PGTZ=UTC"
        conn.execute(text("TRUNCATE dq_results, reports"))
        conn.execute(text("INSERT INTO pools (name, master, cores) VALUES ('p', 'local', 8)"))
    add_app(clean_db, "a", in_service=False)
    return clean_db


@contextmanager
def without_primary_key(engine, table: str, columns: str, nullable: str | None = None):
    """Lift a primary key (and a column's NOT NULL) in the throwaway test database, so a row the
    constraint would refuse can exist, as it could in data not guarded by it; restored after."""
    with engine.begin() as conn:
        conn.execute(text(f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey"))
        if nullable:
            conn.execute(text(f"ALTER TABLE {table} ALTER COLUMN {nullable} DROP NOT NULL"))
    try:
        yield
    finally:
        with engine.begin() as conn:
            conn.execute(text(f"TRUNCATE {table}"))
            if nullable:
                conn.execute(text(f"ALTER TABLE {table} ALTER COLUMN {nullable} SET NOT NULL"))
            conn.execute(text(f"ALTER TABLE {table} ADD PRIMARY KEY ({columns})"))


def failed(results, suite: str) -> set[tuple[str, str | None]]:
    (r,) = [r for r in results if r.suite == suite]
    return {(f["expectation"], f["column"]) for f in r.details.get("failed", [])}


def good_day(engine) -> None:
    add_metrics(engine, [{}] * 10)
    add_metrics(engine, [{"run_id": "r2", "batch_id": 10 + i} for i in range(5)], t0=at(7200))  # a restart
    add_outputs(engine, {"w1": 3, "w2": 1, "w3": 7})


# -- nightly suites on PostgreSQL -----------------------------------------------------------------
def test_good_day_passes_and_is_stored(qdb):
    good_day(qdb)
    results = run_suites(D, files=False)
    assert [(r.suite, r.target, r.app, r.success) for r in results] == [
        ("stage_metrics", "stage_metrics:a", "a", True), ("sink_outputs", STAGE, "a", True)]
    assert results[0].statistics["evaluated_expectations"] == len(suites.stage_metrics_suite().expectations) == 9
    assert results[0].statistics["successful_expectations"] == 9
    with qdb.connect() as conn:
        rows = conn.execute(text("SELECT id, suite, target, app, day, success, statistics, details FROM dq_results "
                                 "ORDER BY id")).all()
    assert [(r.id, r.suite, r.target, r.app, r.day, r.success) for r in rows] == [
        (x.id, x.suite, x.target, x.app, D, True) for x in results]
    assert rows[1].statistics["evaluated_expectations"] == 4 and rows[1].details == {}


BAD_METRICS = {
    "batch id goes backwards in a run": (
        [{}, {}, {}, {"batch_id": 1}, {"batch_id": 4}],
        {("expect_column_pair_values_a_to_be_greater_than_b", "batch_id > prev_batch_id")}),
    "negative input rate": (
        [{}, {"input_rps": -3.0}, {}],
        {("expect_column_values_to_be_between", "input_rps")}),
    "negative processed rate": (
        [{}, {"processed_rps": -0.5}],
        {("expect_column_values_to_be_between", "processed_rps")}),
    "p95 above max": (
        [{}, {"latency_p95_ms": 400.0}],
        {("expect_column_pair_values_a_to_be_greater_than_b", "latency_max_ms >= latency_p95_ms")}),
    "p50 above p95": (
        [{"latency_p50_ms": 250.0}, {}],
        {("expect_column_pair_values_a_to_be_greater_than_b", "latency_p95_ms >= latency_p50_ms")}),
}


@pytest.mark.parametrize("case", list(BAD_METRICS))
def test_bad_metrics_fail_the_right_expectation(qdb, case):
    rows, expected = BAD_METRICS[case]
    add_metrics(qdb, rows)
    results = run_suites(D, files=False)
    assert failed(results, "stage_metrics") == expected
    with qdb.connect() as conn:
        row = conn.execute(text("SELECT success, details, statistics FROM dq_results "
                                "WHERE suite = 'stage_metrics'")).one()
    assert row.success is False
    assert row.statistics["unsuccessful_expectations"] == 1
    assert {(f["expectation"], f["column"]) for f in row.details["failed"]} == expected
    assert "1 of" in row.details["failed"][0]["observed"]


def test_backwards_batch_id_in_another_run_is_fine(qdb):
    """Batch ids restart per run only across runs: a second run may not go back, a new run is separate."""
    add_metrics(qdb, [{"run_id": "r1", "batch_id": 5}, {"run_id": "r2", "batch_id": 3},
                      {"run_id": "r1", "batch_id": 6}])
    assert run_suites(D, files=False)[0].success


def test_null_key_fails(qdb):
    with without_primary_key(qdb, "stage_metrics", "stage_id, run_id, batch_id, ts", nullable="run_id"):
        add_metrics(qdb, [{}, {"run_id": None}, {}])
        results = run_suites(D, files=False)
    assert failed(results, "stage_metrics") == {("expect_column_values_to_not_be_null", "run_id")}


def test_negative_count_fails(qdb):
    add_metrics(qdb, [{}])
    add_outputs(qdb, {"w1": 3, "w2": -2})
    results = run_suites(D, files=False)
    assert failed(results, "sink_outputs") == {("expect_column_values_to_be_between", "count")}
    assert [r.success for r in results] == [True, False]


def test_duplicate_sink_keys_fail(qdb):
    with without_primary_key(qdb, "sink_outputs", "stage_id, key"):
        add_outputs(qdb, {"w1": 3, "w2": 1})
        add_outputs(qdb, {"w1": 4}, batch_id=1)
        results = run_suites(D, files=False)
    assert failed(results, "sink_outputs") == {("expect_column_values_to_be_unique", "key")}


def test_only_the_day_and_app_asked_for(qdb):
    add_app(qdb, "b", in_service=False)
    add_metrics(qdb, [{}, {"input_rps": -1.0}], stage_id="b.s")                       # app b: bad
    add_metrics(qdb, [{}, {"input_rps": -1.0}], t0=at(3600, D + timedelta(days=1)))   # a: bad, next day
    add_metrics(qdb, [{}, {}])                                                         # a: good on D
    assert [(r.target, r.success) for r in run_suites(D, app="a", files=False)] == [("stage_metrics:a", True)]
    assert [(r.target, r.success) for r in run_suites(D, files=False)] == [
        ("stage_metrics:a", True), ("stage_metrics:b", False)]
    with qdb.connect() as conn:
        shown = conn.execute(db.query("report_dq_results"), {"day": D, "app": None}).all()
    assert [(r.target, r.success, r.runs) for r in shown] == [("stage_metrics:a", True, 2),
                                                              ("stage_metrics:b", False, 1)]


def test_report_shows_the_results(qdb, tmp_path):
    from streamops.report import nightly

    add_metrics(qdb, [{}, {"input_rps": -1.0}])
    run_suites(D, files=False)
    html = nightly.build_report(D, out_dir=tmp_path).read_text()
    assert "stage_metrics:a" in html and "expect_column_values_to_be_between input_rps 1 of 2 rows" in html


# -- the gate after a reconfiguration -------------------------------------------------------------
def add_deployment(engine, started_at: datetime, stage_id: str = STAGE, sink: dict | None = None) -> int:
    cfg = {"spec": {"sink": sink or {"kind": "postgres"}}}
    with engine.begin() as conn:
        return conn.execute(text(
            "INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, status, "
            "started_at, running_at) VALUES (:s, 'p', 2, 2, CAST(:c AS jsonb), 'local', '/x', 'running', :a, :a) "
            "RETURNING id"), {"s": stage_id, "c": json.dumps(cfg), "a": started_at}).scalar_one()


def new_run(engine, metric_rows: list[dict], counts: dict[str, int], first_batch: int = 20) -> int:
    """A new run (deployment) started now that committed len(metric_rows) batches from `first_batch`;
    batch `first_batch` wrote `counts`. An older run's outputs (earlier batch ids) are not its own."""
    t0 = datetime.now(UTC) - timedelta(seconds=30)
    dep = add_deployment(engine, t0)
    add_metrics(engine, [{"run_id": f"run{dep}", "batch_id": first_batch + i, **r} for i, r in enumerate(metric_rows)],
                deployment_id=dep, t0=t0 + timedelta(seconds=5))
    with engine.begin() as conn:
        for i in range(len(metric_rows)):
            conn.execute(text("INSERT INTO sink_commits (stage_id, deployment_id, batch_id, rows, committed_at) "
                              "VALUES (:s, :d, :b, 1, now())"), {"s": STAGE, "d": dep, "b": first_batch + i})
    add_outputs(engine, counts, batch_id=first_batch, written_at=datetime.now(UTC))
    return dep


def test_gate_passes_a_good_run_quickly(qdb):
    add_outputs(qdb, {"old": -5}, batch_id=3)  # the previous run's bad row is not this run's output
    dep = new_run(qdb, [{}] * 8, {"w1": 3, "w2": 9})
    started = time.monotonic()
    gate = gate_new_run(dep, first_batches=5)
    elapsed = time.monotonic() - started
    print(f"\ngate_new_run: {elapsed:.2f}s (details say {gate.details['elapsed_s']}s)")
    assert gate.passed and bool(gate), gate.details
    assert elapsed < 5.0
    assert gate.details["stage_id"] == STAGE and gate.details["elapsed_s"] < 5.0
    assert [(r["suite"], r["success"]) for r in gate.details["results"]] == [
        ("gate_stage_metrics", True), ("gate_sink_outputs", True)]
    assert gate.results[0].statistics["evaluated_expectations"] == 10  # the suite plus "has rows"
    with qdb.connect() as conn:
        stored = conn.execute(text("SELECT suite, target, success FROM dq_results ORDER BY id")).all()
    assert [tuple(r) for r in stored] == [("gate_stage_metrics", f"{STAGE}#{dep}", True),
                                          ("gate_sink_outputs", f"{STAGE}#{dep}", True)]


def test_gate_checks_only_the_first_batches(qdb):
    dep = new_run(qdb, [{}] * 5 + [{"latency_p95_ms": 999.0}], {"w1": 3})
    assert gate_new_run(dep, first_batches=5).passed
    assert not gate_new_run(dep, first_batches=6).passed


def test_gate_after_a_change_in_the_running_driver_judges_the_batches_after_it(qdb):
    """A live or in-driver change keeps the run: its first batches predate the change, which did
    not produce them. With `since`, the gate judges the first batches after the change."""
    dep = new_run(qdb, [{"latency_p95_ms": 999.0}] * 2 + [{}] * 5, {"w1": 3})
    with qdb.connect() as conn:
        third = conn.execute(text("SELECT ts FROM stage_metrics WHERE deployment_id = :d ORDER BY ts OFFSET 2 LIMIT 1"),
                             {"d": dep}).scalar_one()
    assert not gate_new_run(dep, first_batches=5).passed, "the run's first batches are bad"
    assert gate_new_run(dep, first_batches=5, since=third).passed, "the batches since the change are good"
    assert not gate_new_run(dep, first_batches=5, since=third - timedelta(seconds=1)).passed


@pytest.mark.parametrize("metrics,counts,expected", [
    ([{}, {"input_rps": -1.0}, {}], {"w1": 1},
     {("gate_stage_metrics", "expect_column_values_to_be_between", "input_rps")}),
    ([{}, {"batch_id": 19}], {"w1": 1},
     {("gate_stage_metrics", "expect_column_pair_values_a_to_be_greater_than_b", "batch_id > prev_batch_id")}),
    ([{}, {}], {"w1": 1, "w2": -4},
     {("gate_sink_outputs", "expect_column_values_to_be_between", "count")}),
    ([], {"w1": 1},
     {("gate_stage_metrics", "expect_table_row_count_to_be_between", None)}),
], ids=["negative rate", "batch id backwards", "negative count", "no batch yet"])
def test_gate_fails_a_bad_run(qdb, metrics, counts, expected):
    dep = new_run(qdb, metrics, counts)
    gate = gate_new_run(dep, first_batches=5)
    assert not gate.passed
    got = {(r["suite"], f["expectation"], f["column"]) for r in gate.details["results"] for f in r.get("failed", [])}
    assert got == expected
    assert gate.reason.startswith("data-quality gate failed: ")
    with qdb.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM dq_results WHERE NOT success")).scalar_one() == 1


def test_gate_of_unknown_deployment_fails(qdb):
    gate = gate_new_run(987654)
    assert not gate.passed and gate.details["error"] == "no such deployment"


def test_gate_parquet_sink_checks_metrics_only(qdb):
    t0 = datetime.now(UTC) - timedelta(seconds=30)
    dep = add_deployment(qdb, t0, sink={"kind": "parquet", "path": "/tmp/x"})
    add_metrics(qdb, [{"run_id": "p"}, {"run_id": "p"}], deployment_id=dep, t0=t0 + timedelta(seconds=1))
    gate = gate_new_run(dep)
    assert gate.passed and [r["suite"] for r in gate.details["results"]] == ["gate_stage_metrics"]


# -- input records and a Parquet sink, through Spark ----------------------------------------------
def _write_input(directory, name: str, lines: list[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text("".join(line + "\n" for line in lines))


@pytest.mark.e2e
def test_input_records_and_parquet_sink_with_spark(qdb, spark, tmp_path):
    from spark_apps import quality_files as sf
    from streamops.generator import records

    now = datetime.now(UTC)
    rng = random.Random(7)
    recs = records.make_records("web", 40, rng=rng, start_seq=0, run="t", ts_from=now - timedelta(seconds=5),
                                ts_to=now - timedelta(seconds=1))
    good, bad = tmp_path / "good", tmp_path / "bad"
    _write_input(good, "part-t-00000000.json", [records.dumps(r) for r in recs[:20]])
    _write_input(good, "part-t-00000001.json", [records.dumps(r) for r in recs[20:]])
    future = dict(recs[0], id="t-future", ts=records.format_ts(records.epoch_ms_ceil(now + timedelta(hours=2))))
    ancient = dict(recs[1], id="t-ancient", ts="2001-01-01T00:00:00.000Z")
    malformed = [records.dumps(dict(r, id=f"t-bad{i}", ts=str(records.ts_to_ms(r["ts"]))))
                 for i, r in enumerate(recs[2:6])]
    _write_input(bad, "part-t-00000000.json", [records.dumps(r) for r in recs[10:40]] + malformed
                 + [records.dumps(future), records.dumps(ancient)])

    v = Validator(qdb)
    day = now.date()
    source = demo_job("wordcount", {"path": str(good)})["source"]
    ok = to_result(sf.validate_input_files(v, spark, sorted(good.glob("part-*.json")), source),
                   "input_records", str(good), "a", day)
    assert ok.success, ok.details
    assert ok.statistics["evaluated_expectations"] == len(suites.input_records_suite(
        {"id": "string", "ts": "timestamp", "ip": "string", "url": "string", "status": "int", "user": "string",
         "words": "string"}, "ts", "web").expectations)
    ko = to_result(sf.validate_input_files(v, spark, [bad / "part-t-00000000.json"], source),
                   "input_records", str(bad), "a", day)
    assert {(f["expectation"], f["column"]) for f in ko.details["failed"]} == {
        ("expect_column_values_to_be_null", "reason"),            # 4 of 36 malformed > 5 %
        ("expect_column_values_to_not_be_null", "ts"),            # the same 4: ts is epoch millis
        ("expect_column_values_to_be_between", "event_age_s"),    # 2 h in the future
        ("expect_column_values_to_be_between", "publish_lag_s"),  # the future one and the 2001 one
    }

    # A Parquet sink: one directory per batch; a key twice in one batch and a negative count fail.
    from pyspark.sql import Row

    sink = tmp_path / "sink"
    for b, rows in {0: [("w1", 1), ("w2", 2)], 1: [("w1", 3), ("w1", 4), ("w3", -1)]}.items():
        spark.createDataFrame([Row(key=k, value=json.dumps({"word": k, "count": n}), event_ts=now,
                                   version=float(max(n, 0)))
                               for k, n in rows]).coalesce(1).write.mode("overwrite").parquet(
            str(sink / f"batch_id={b}"))
    pq = to_result(sf.validate_parquet_sink(v, spark, sink, sorted(sink.glob("batch_id=*/*.parquet"))),
                   "sink_outputs_parquet", str(sink), "a", day)
    assert {(f["expectation"], f["column"]) for f in pq.details["failed"]} == {
        ("expect_compound_columns_to_be_unique", "batch_id, key"), ("expect_column_values_to_be_between", "count")}

    # The nightly run finds both through the stages' specs (files published today).
    with qdb.begin() as conn:
        conn.execute(text("UPDATE stages SET spec = CAST(:s AS jsonb) WHERE stage_id = :id"),
                     {"id": STAGE, "s": json.dumps({**demo_job("wordcount", {"kind": "files", "path": str(good)}),
                                                    "sink": {"kind": "parquet", "path": str(sink)}})})
    results = run_suites(day)  # the Spark suites run as their own job (spark_apps/quality_files.py)
    assert [(r.suite, r.target, r.success) for r in results] == [
        ("input_records", f"{STAGE}:{good}", True), ("sink_outputs_parquet", str(sink), False)]


def test_a_full_day_of_the_report_fixture_passes(clean_db):
    """The report's hand-built day (3 stages, 172 800 batches, a restart gap) is clean data."""
    from tests.integration.test_report import two_apps

    two_apps(clean_db, D)
    started = time.monotonic()
    results = run_suites(D, files=False)
    print(f"\nrun_suites over 172 800 stage_metrics rows: {time.monotonic() - started:.2f}s")
    assert [(r.target, r.success) for r in results] == [("stage_metrics:taxi", True), ("stage_metrics:web", True)]
    assert all(r.statistics["evaluated_expectations"] == 9 for r in results)


def test_reconfiguration_gate_waits_for_metrics_written_after_the_commit(qdb):
    """The agent writes a batch's metrics row after the sink's commit, asynchronously: right after
    catch-up the run may have committed batches whose rows have not landed. The gate waits for
    them instead of failing a healthy run for "no rows" (it did, in the reconfiguration matrix)."""
    import threading
    from types import SimpleNamespace

    from streamops.execute import reconfigure

    t0 = datetime.now(UTC) - timedelta(seconds=30)
    dep = add_deployment(qdb, t0)
    with qdb.begin() as conn:
        for b in range(20, 28):
            conn.execute(text("INSERT INTO sink_commits (stage_id, deployment_id, batch_id, rows, committed_at) "
                              "VALUES (:s, :d, :b, 1, now())"), {"s": STAGE, "d": dep, "b": b})
    add_outputs(qdb, {"w1": 3, "w2": 9}, batch_id=20, written_at=datetime.now(UTC))
    late = threading.Timer(2.0, lambda: add_metrics(qdb, [{"run_id": "late", "batch_id": 20 + i} for i in range(8)],
                                                    deployment_id=dep, t0=t0 + timedelta(seconds=5)))
    late.start()
    started = time.monotonic()
    ex = SimpleNamespace(stage_id=STAGE, progress=lambda _: None, row=SimpleNamespace(action="scale_out"),
                         switched_at=None)
    reason = reconfigure._quality_gate(ex, dep, gate_new_run)
    late.join()
    assert reason is None, reason
    assert time.monotonic() - started >= 2.0, "it waited for the rows"
