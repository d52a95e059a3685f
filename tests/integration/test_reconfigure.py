"""Reconfiguration of a live stateful stage, checked against the generator's ground truth."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from sqlalchemy import text

from demo import oracles
from demo.stages import demo_job
from streamops import generator, quality, registry
from streamops.execute import checkpoint, mechanisms, reconfigure, stages, staging
from tests.integration.test_e2e_stage import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.db]


def _registry(name: str, pool_cores: int = 2) -> registry.Registry:
    """One stage `rc.<name>` with its own input and checkpoint: tests share a state directory."""
    stage = {**demo_job("wordcount", {"kind": "files", "path": f"rc/{name}", "max_files_per_trigger": 3}),
             "cores": {"initial": 1, "max": 2}, "state_partitions": 2, "trigger_interval_ms": 1000, "pool": "p",
             "policy": {"kind": "edf"}}
    return registry.parse({
        "pools": {"p": {"cores": pool_cores}},
        "apps": {"rc": {"r_max_ms": 5000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                        "stages": {name: stage}}},
    })


class Feeder:
    """The generator running continuously in the background, like production load."""

    def __init__(self, path: str, seed: int, rate: int = 150):
        self.out = registry.resolve_path(path)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=generator.generate, daemon=True, kwargs=dict(
            out_dir=self.out, kind="web", trace=f"constant:rate={rate}", seed=seed, duration_s=600,
            stop_event=self.stop))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)


def _commits(engine, sid: str) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM sink_commits WHERE stage_id = :s AND rows > 0"),
                            {"s": sid}).scalar_one()


def _row(engine, rid: int):
    with engine.connect() as conn:
        return conn.execute(text("SELECT * FROM reconfigurations WHERE id = :i"), {"i": rid}).one()


def _settle_and_compare(engine, feeder: Feeder, sid: str):
    feeder.__exit__()
    want = oracles.expected("wordcount", generator.read_valid_records(feeder.out))
    eventually(lambda: oracles.actual(engine, sid, "wordcount") == want, 120, "the sink to equal the ground truth")


def test_pause_resume_scale_out_with_repartition_loses_and_doubles_nothing(clean_db):
    reg = _registry("pr")
    with Feeder("rc/pr", seed=21) as feeder:
        stages.start_stage("rc.pr", reg)
        eventually(lambda: _commits(clean_db, "rc.pr") >= 3, 120, "three committed batches")
        rid = reconfigure.request("rc.pr", "scale_out", cores=2, partitions=4, reg=reg, requested_by="test")
        result = {}
        worker = threading.Thread(
            target=lambda: result.update(o=reconfigure.execute(rid, gate=quality.gate_new_run, reg=reg)))
        worker.start()
        eventually(lambda: _row(clean_db, rid).status == "running", 30, "the reconfiguration to start")
        with pytest.raises(reconfigure.ReconfigurationBusy):
            # a second executor for the same stage is turned away
            reconfigure.execute(rid, gate=quality.gate_new_run, reg=reg)
        worker.join(300)
        outcome = result["o"]
        assert outcome.status == "done", outcome.detail
        _settle_and_compare(clean_db, feeder, "rc.pr")

    row = _row(clean_db, rid)
    assert row.status == "done" and row.mechanism == "pause_resume" and row.requested_by == "test"
    stamps = [row.requested_at, row.stop_requested_at, row.stopped_at, row.state_ready_at, row.restarted_at,
              row.first_batch_done_at]
    assert all(stamps) and stamps == sorted(stamps), "every phase stamped, in order"
    assert row.downtime_ms and row.downtime_ms > 0, "downtime measured from the commit gap"
    with clean_db.connect() as conn:
        dep = conn.execute(text("SELECT * FROM deployments WHERE stage_id = 'rc.pr' ORDER BY id DESC LIMIT 1")).one()
    assert (dep.cores, dep.state_partitions) == (2, 4)
    assert checkpoint.state_partitions(dep.checkpoint) == 4, "the state was repartitioned offline"
    # The first start warms up on a sample; the restart does not: its output gap is measured, and
    # the warm-up takes longer than the cold batch it saves (docs/reconfiguration.md, Cold starts).
    with clean_db.connect() as conn:
        first_log = conn.execute(text("SELECT log_path FROM deployments WHERE stage_id = 'rc.pr' ORDER BY id LIMIT 1"))\
            .scalar_one()
    assert "action=warm-up took" in Path(first_log).read_text()
    assert "action=warm-up" not in Path(dep.log_path).read_text()
    stages.stop_stage("rc.pr", reg, deadline_s=30)


def test_a_failing_new_run_is_rolled_back_and_nothing_is_lost(clean_db):
    reg = _registry("rb")
    with Feeder("rc/rb", seed=22) as feeder:
        stages.start_stage("rc.rb", reg)
        eventually(lambda: _commits(clean_db, "rc.rb") >= 2, 120, "two committed batches")
        rid = reconfigure.request("rc.rb", "scale_out", cores=2, reg=reg, requested_by="test")
        outcome = reconfigure.execute(rid, gate=quality.gate_new_run, reg=reg, fault="fail_batches",
                                     deadlines=mechanisms.Deadlines(first_batch_s=60))
        assert outcome.status == "rolled_back"
        _settle_and_compare(clean_db, feeder, "rc.rb")

    row = _row(clean_db, rid)
    assert row.status == "rolled_back" and "failed before its first commit" in row.rollback_reason
    assert "RuntimeError: injected fault" in row.rollback_reason, row.rollback_reason
    assert row.downtime_ms and row.downtime_ms > 0, "the extra downtime of the rollback is recorded"
    with clean_db.connect() as conn:
        runs = conn.execute(text("SELECT cores, status, stop_reason FROM deployments "
                                 "WHERE stage_id = 'rc.rb' ORDER BY id")).all()
    assert [r.cores for r in runs] == [1, 2, 1], "old config, failed new config, old config again"
    assert runs[1].status == "failed" and "injected fault" in (runs[1].stop_reason or "")
    assert runs[2].status == "running"
    stages.stop_stage("rc.rb", reg, deadline_s=30)


@pytest.mark.slow
def test_a_new_run_with_wrong_output_fails_the_quality_gate_and_is_rolled_back(clean_db):
    """Its batches succeed but its counts are negative: only the data-quality gate on the first
    batches can tell, and its failure rolls the change back with the failed expectation named."""
    reg = _registry("qg")
    with Feeder("rc/qg", seed=25) as feeder:
        stages.start_stage("rc.qg", reg)
        eventually(lambda: _commits(clean_db, "rc.qg") >= 2, 120, "two committed batches")
        rid = reconfigure.request("rc.qg", "scale_out", cores=2, reg=reg, requested_by="test")
        outcome = reconfigure.execute(rid, gate=quality.gate_new_run, reg=reg, fault="negative_counts")
        assert outcome.status == "rolled_back", outcome.detail
        # The old configuration replays the rejected run's batches: its rows replace the wrong ones.
        _settle_and_compare(clean_db, feeder, "rc.qg")
    row = _row(clean_db, rid)
    assert row.rollback_reason.startswith("data-quality gate failed"), row.rollback_reason
    assert "count" in row.rollback_reason, row.rollback_reason
    with clean_db.connect() as conn:
        runs = conn.execute(text("SELECT cores, status FROM deployments WHERE stage_id = 'rc.qg' ORDER BY id")).all()
        gate = conn.execute(text("SELECT success FROM dq_results WHERE target LIKE 'rc.qg#%' "
                                 "AND suite = 'gate_sink_outputs'")).scalars().all()
    assert [r.cores for r in runs] == [1, 2, 1] and runs[2].status == "running", runs
    assert False in gate, "the failed gate is recorded for the report"
    stages.stop_stage("rc.qg", reg, deadline_s=30)


@pytest.mark.slow
def test_prestaged_scale_out_starts_from_the_repartitioned_copy(clean_db):
    reg = _registry("ps")
    with Feeder("rc/ps", seed=23) as feeder:
        stages.start_stage("rc.ps", reg)
        eventually(lambda: _commits(clean_db, "rc.ps") >= 2, 120, "two committed batches")
        first = staging.prestage("rc.ps", 4, reg)  # at the alarming level, while the primary runs
        # The sink records a commit inside foreachBatch, before Spark writes commits/N, so the
        # checkpoint may be one batch behind the sink: the copy is as of the checkpoint's batch.
        assert checkpoint.state_partitions(first.path) == 4 and first.as_of_batch >= 0
        # Spark's offline repartition records itself as one more batch on top of the copy.
        assert checkpoint.last_committed_batch(first.path) == first.as_of_batch + 1
        assert staging.prestage("rc.ps", 4, reg) == first, "a recent copy is kept"
        eventually(lambda: _commits(clean_db, "rc.ps") >= first.as_of_batch + 6, 60, "the primary to keep committing")
        # A copy that fell behind would be replayed for as long as it lags: it is taken again.
        staged = staging.prestage("rc.ps", 4, reg, max_lag_batches=1)
        assert staged.id != first.id and staged.as_of_batch > first.as_of_batch
        assert not Path(first.path).exists(), "the stale copy is discarded"
        rid = reconfigure.request("rc.ps", "scale_out", cores=2, partitions=4, mechanism="prestaged", reg=reg,
                                 requested_by="test")
        outcome = reconfigure.execute(rid, gate=quality.gate_new_run, reg=reg)
        assert outcome.status == "done", outcome.detail
        _settle_and_compare(clean_db, feeder, "rc.ps")

    row = _row(clean_db, rid)
    assert row.staged_checkpoint == staged.path and row.repartition_ms is None, "no repartition in the outage"
    with clean_db.connect() as conn:
        dep = conn.execute(text("SELECT * FROM deployments WHERE id = :i"), {"i": row.new_deployment_id}).one()
        used = conn.execute(text("SELECT status FROM staged_checkpoints WHERE id = :i"), {"i": staged.id}).scalar_one()
    assert dep.checkpoint == staged.path and (dep.cores, dep.state_partitions) == (2, 4) and used == "used"
    stages.stop_stage("rc.ps", reg, deadline_s=30)


# Slow: its secondary must catch up with the primary on the same 2 cores; on a saturated day it
# did not within its deadlines (clean-clone run of 2026-11-25) and the switch was rolled back.
@pytest.mark.slow
def test_active_backup_switches_without_an_outage_and_is_refused_without_room(clean_db):
    with Feeder("rc/ab", seed=24) as feeder:
        small = _registry("ab", pool_cores=2)
        stages.start_stage("rc.ab", small)
        eventually(lambda: _commits(clean_db, "rc.ab") >= 2, 120, "two committed batches")
        rid = reconfigure.request("rc.ab", "scale_out", cores=2, mechanism="active_backup", reg=small,
                                  requested_by="test")
        refused = reconfigure.execute(rid, gate=quality.gate_new_run, reg=small)
        assert refused.status == "cancelled" and "free of 2 cores" in refused.detail
        assert _row(clean_db, refused.reconfiguration_id).status == "cancelled"
        with clean_db.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM deployments "
                                     "WHERE stage_id = 'rc.ab' AND status = 'running'")).scalar_one() == 1

        big = _registry("ab", pool_cores=4)  # room for the primary and the secondary during the overlap
        rid = reconfigure.request("rc.ab", "scale_out", cores=2, partitions=4, mechanism="active_backup", reg=big,
                                 requested_by="test")
        outcome = reconfigure.execute(rid, gate=quality.gate_new_run, reg=big)
        assert outcome.status == "done", outcome.detail
        _settle_and_compare(clean_db, feeder, "rc.ab")

    row = _row(clean_db, rid)
    assert row.restarted_at < row.stop_requested_at, "the secondary ran before the primary was stopped"
    with clean_db.connect() as conn:
        runs = conn.execute(text("SELECT id, role, status, cores FROM deployments "
                                 "WHERE stage_id = 'rc.ab' ORDER BY id")).all()
    assert runs[0].status == "stopped" and (runs[-1].role, runs[-1].status, runs[-1].cores) == ("primary", "running", 2)
    stages.stop_stage("rc.ab", big, deadline_s=30)
