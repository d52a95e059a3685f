"""A copy of a *live* checkpoint is consistent as of its last committed batch, even when a
batch is running while it is copied; resuming from the copy gives exactly the expected output."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from demo import oracles
from spark_apps.stage import start_stage_queries
from streamops import generator, registry
from streamops.agent.metrics import StageContext
from streamops.execute import checkpoint
from tests.integration.test_workloads import _stage

pytestmark = pytest.mark.db


def test_copy_during_a_running_batch_resumes_to_the_exact_output(spark, clean_db, tmp_path):
    path = "in-copy"
    inputs = registry.resolve_path(path)
    generator.generate(inputs, "web", "constant:rate=200", seed=31, duration_s=30, realtime=False,
                       start=datetime(2026, 11, 21, 12, tzinfo=UTC))
    stage = _stage("wordcount", path, params={"cpu_cost": 1500}, trigger_interval_ms=200)
    sid, live, copy = "t.copy", tmp_path / "live", tmp_path / "copy"
    ctx = StageContext(sid, None, 2, 2, 200)

    queries = start_stage_queries(spark, stage, ctx, inputs, live)
    try:
        main = queries[0]
        deadline = time.monotonic() + 120
        def half_written() -> bool:  # offsets/N+1 planned, commits/N+1 not yet written
            done = checkpoint.last_committed_batch(live)
            return done is not None and done >= 1 and (checkpoint.last_planned_batch(live) or -1) > done

        while not half_written():
            assert time.monotonic() < deadline and main.isActive, "no batch in flight to copy during"
            time.sleep(0.01)
        in_flight = checkpoint.last_planned_batch(live)
        n = checkpoint.copy_live(live, copy)
    finally:
        for q in queries:
            q.stop()

    assert checkpoint.last_committed_batch(copy) == n
    assert checkpoint.last_planned_batch(copy) == n, "the batch in flight is not in the copy"
    assert in_flight > n, "a batch was in flight while copying"
    zips = [int(p.name.split(".")[0]) for p in (copy / "state").rglob("*.zip")]
    assert zips and max(zips) == n + 1, "state only up to the version batch N committed"
    assert not [p for p in copy.rglob("*") if p.name.endswith(".tmp")]

    # Resume from the copy, as a pre-staged scale-out would: same sink, replay from the source.
    resumed = start_stage_queries(spark, stage, ctx, inputs, copy, available_now=True)
    for q in resumed:
        q.awaitTermination(300)
        assert q.exception() is None, q.exception()
    assert oracles.actual(clean_db, sid, "wordcount") == \
        oracles.expected("wordcount", generator.read_valid_records(inputs))


def test_a_staged_copy_s_name_stays_bounded_across_switches(tmp_path):
    from streamops.execute.staging import staged_path

    first = staged_path(tmp_path / "a.s")
    again = staged_path(first)
    assert first.name.startswith("a.s.staged-") and again.name.count(".staged-") == 1


def test_restore_puts_a_whole_copy_in_place_and_keeps_the_copy(tmp_path):
    from streamops.execute import checkpoint as ops

    ckpt, copy = tmp_path / "ckpt", tmp_path / "copy"
    (ckpt / "commits").mkdir(parents=True)
    (ckpt / "commits" / "9").write_text("newer, to be replaced\n")
    (copy / "commits").mkdir(parents=True)
    (copy / "commits" / "3").write_text("v1\n")
    ops.restore(copy, ckpt)
    assert sorted(p.name for p in (ckpt / "commits").iterdir()) == ["3"] and (copy / "commits" / "3").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "copy"], "no leftovers beside it"
