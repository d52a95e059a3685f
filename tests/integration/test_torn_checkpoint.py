"""A torn checkpoint no longer stops a stage for good (issue 48): a real driver runs wordcount,
stops, and its newest offsets file is cut in half (a crash mid-write); the next start moves it
aside with its commit, names them, runs batch N again from the last intact one, and the sink
equals the ground truth. The issue's own fault, a driver killed over a torn file, is recovered by
the supervisor: the failure names what was moved aside, and the report counts its downtime."""

from __future__ import annotations

import os
import shutil
import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from demo import oracles
from demo.stages import demo_job
from streamops import generator, registry
from streamops.checkpoint_layout import last_committed_batch, last_planned_batch
from streamops.execute import stages, supervisor
from tests.integration.test_e2e_stage import _commits, eventually

# A real fault on a real driver (about 40 s): make test-chaos; the repair itself is
# tests/unit/test_checkpoint_repair.py's, in make test.
pytestmark = [pytest.mark.e2e, pytest.mark.db, pytest.mark.chaos, pytest.mark.slow]

SID, PATH = "torn.wc", "torn/in"


def _registry() -> registry.Registry:
    stage = {**demo_job("wordcount", {"kind": "files", "path": PATH, "max_files_per_trigger": 2}),
             "cores": {"initial": 1, "max": 1}, "state_partitions": 2, "trigger_interval_ms": 500, "pool": "p"}
    return registry.parse({
        "pools": {"p": {"cores": 2, "spark_ui": False}},
        "apps": {"torn": {"r_max_ms": 5000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                          "stages": {"wc": stage}}},
    })


def _config(engine, dep_id: int) -> dict:
    with engine.connect() as conn:
        return conn.execute(text("SELECT config FROM deployments WHERE id = :i"), {"i": dep_id}).scalar_one()


def _two_commits_in(clean_db, seed: int) -> tuple[registry.Registry, Path, stages.StartResult]:
    """A new run of the stage, on a new checkpoint and 16 s of input, once it committed twice."""
    for old in registry.resolve_path("checkpoints").glob(f"{SID}*"):
        shutil.rmtree(old)
    inputs = registry.resolve_path(PATH)
    generator.generate(inputs, "web", "constant:rate=100", seed=seed, duration_s=16, realtime=False,
                       start=datetime(2026, 11, 27, 12, tzinfo=UTC))
    reg = _registry()
    first = stages.start_stage(SID, reg, warm_up=False)
    eventually(lambda: _commits(clean_db, SID) >= 2, 90, "two committed batches")
    return reg, inputs, first


def test_a_torn_newest_offsets_file_is_moved_aside_and_the_stage_resumes_exactly(clean_db):
    reg, inputs, first = _two_commits_in(clean_db, seed=48)
    stages.stop_stage(SID, reg, deadline_s=30)

    ckpt = Path(stages.checkpoint_for(SID))
    n = last_planned_batch(ckpt)
    offsets = ckpt / "offsets" / str(n)
    data = offsets.read_bytes()
    offsets.write_bytes(data[: len(data) // 2])  # a crash mid-write: the newest entry torn in half

    started = time.monotonic()
    again = stages.start_stage(SID, reg, warm_up=False)
    print(f"torn offsets/{n}: running again {time.monotonic() - started:.1f}s after the start")
    assert again.deployment_id != first.deployment_id
    assert f"main offsets/{n}" in again.repaired and f"main commits/{n}" in again.repaired, again.repaired
    assert _config(clean_db, again.deployment_id)["checkpoint_repair"] == again.repaired
    (aside,) = (ckpt / "_torn").iterdir()
    assert (aside / "offsets" / str(n)).read_bytes() == data[: len(data) // 2], "kept, not deleted"

    want = oracles.expected("wordcount", generator.read_valid_records(inputs))
    eventually(lambda: oracles.actual(clean_db, SID, "wordcount") == want, 90, "the sink to equal the ground truth")
    assert last_committed_batch(ckpt) >= n, "batch N ran again from the last intact one"
    stages.stop_stage(SID, reg, deadline_s=30)


def test_a_driver_killed_over_a_torn_offsets_file_is_recovered_and_the_report_counts_its_downtime(clean_db):
    """The live run's fault: the newest `offsets/N` torn, the driver killed. Before, every restart
    failed on it, the stage was given up 1 s after the kill, and a hand repair took 266.8 s. The
    supervisor starts after the tear here, so that its first look finds both at once."""
    reg, inputs, first = _two_commits_in(clean_db, seed=49)
    os.killpg(first.pid, signal.SIGKILL)
    killed = time.monotonic()
    ckpt = Path(stages.checkpoint_for(SID))
    n = last_planned_batch(ckpt)
    offsets = ckpt / "offsets" / str(n)
    offsets.write_bytes(offsets.read_bytes()[: offsets.stat().st_size // 2])
    generator.generate(inputs, "web", "constant:rate=100", seed=50, duration_s=8, realtime=False,
                       start=datetime(2026, 11, 27, 12, 1, tzinfo=UTC))  # input waits through the outage

    sup, stop, thread = supervisor.start_in_thread(reg, supervisor.SupervisorOptions(wait_s=90, warm_spares=False))
    try:
        want = oracles.expected("wordcount", generator.read_valid_records(inputs))
        eventually(lambda: oracles.actual(clean_db, SID, "wordcount") == want, 120,
                   "the sink to equal the ground truth")
        recovered_s = time.monotonic() - killed
        eventually(lambda: _closed_failures(clean_db) == 1, 60, "the failure closed")
    finally:
        stop.set()
        thread.join(60)
    with clean_db.connect() as conn:
        f = conn.execute(text("SELECT kind, status, detail, downtime_ms, mttr_ms FROM failures "
                              "WHERE stage_id = :s"), {"s": SID}).one()
        counted = conn.execute(text("SELECT sum(downtime_failure_s) FROM reporting.downtime_daily "
                                    "WHERE day >= current_date - 1 AND app = 'torn'")).scalar_one()
    print(f"torn offsets/{n} and the driver killed: sink equal to the truth {recovered_s:.1f}s after the kill; "
          f"MTTR {f.mttr_ms / 1000:.1f}s, output gap counted {f.downtime_ms / 1000:.1f}s")
    assert (f.kind, f.status) == ("dead_pid", "recovered"), f
    assert f"offsets/{n}" in f.detail and "checkpoint repaired: moved aside" in f.detail, f.detail
    assert float(counted) == pytest.approx(f.downtime_ms / 1000, abs=0.01), "the report counts the gap"
    assert last_committed_batch(ckpt) >= n, "batch N ran again from the last intact one"
    stages.stop_stage(SID, reg, deadline_s=30)


def _closed_failures(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM failures WHERE stage_id = :s AND status = 'recovered'"),
                            {"s": SID}).scalar_one()
