"""A torn checkpoint no longer stops a stage for good (issue 48): a real driver runs wordcount,
stops, and its newest offsets file is cut in half (a crash mid-write); the next start moves it
aside with its commit, names them, runs batch N again from the last intact one, and the sink
equals the ground truth."""

from __future__ import annotations

import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from demo import oracles
from demo.stages import demo_job
from streamops import generator, registry
from streamops.checkpoint_layout import last_committed_batch, last_planned_batch
from streamops.execute import stages
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


def test_a_torn_newest_offsets_file_is_moved_aside_and_the_stage_resumes_exactly(clean_db):
    for old in registry.resolve_path("checkpoints").glob(f"{SID}*"):
        shutil.rmtree(old)
    inputs = registry.resolve_path(PATH)
    generator.generate(inputs, "web", "constant:rate=100", seed=48, duration_s=16, realtime=False,
                       start=datetime(2026, 11, 27, 12, tzinfo=UTC))
    reg = _registry()
    first = stages.start_stage(SID, reg, warm_up=False)
    eventually(lambda: _commits(clean_db, SID) >= 2, 90, "two committed batches")
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
