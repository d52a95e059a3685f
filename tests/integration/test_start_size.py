"""A new deployment starts at the size its input needs (issue 48, item 10): what execute/start_inputs
reads (the stage's last run and its metrics, the files waiting, the pool's room), and a real start
of a stage with a waiting backlog that begins above `cores.initial`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from demo.stages import demo_job
from streamops import generator, registry
from streamops.execute import stages
from streamops.run_spec import RunSpec

pytestmark = [pytest.mark.db]

SID = "ss.wc"


def _registry(path: str, sibling: bool = False, source: dict | None = None, **cores) -> registry.Registry:
    stage = {**demo_job("wordcount", {"kind": "files", "path": path, "max_files_per_trigger": 10, **(source or {})}),
             "cores": {"initial": 1, "max": 2, **cores}, "state_partitions": 2, "trigger_interval_ms": 1000,
             "pool": "p"}
    stages_ = {"wc": stage, **({"other": {**stage, "source": {**stage["source"], "path": path + "-other"}}}
                               if sibling else {})}
    return registry.parse({
        "pools": {"p": {"cores": 2}},
        "apps": {"ss": {"r_max_ms": 5000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                        "stages": stages_}},
    })


def _choose(reg: registry.Registry):
    from streamops.execute import start_inputs  # issue 48, item 10

    _, _, st = reg.stage(SID)
    return start_inputs.choose(SID, st, "p", reg.pools["p"], stages.checkpoint_for(SID))


def _waiting(path: str, rows_per_s: int = 200, seconds: int = 30) -> int:
    """A backlog written at once: `seconds` files of `rows_per_s` rows each. Rows written."""
    generator.generate(registry.resolve_path(path), "web", f"constant:rate={rows_per_s}", seed=48, duration_s=seconds,
                       realtime=False)
    return rows_per_s * seconds


def _last_run(engine, *, cores: int = 1, rows: int = 100, batch_ms: int = 2000, every_s: int = 5) -> int:
    """A run of the stage that stopped a minute ago, with 12 batches of metrics: `rows` rows every
    `every_s` s, each batch busy `batch_ms` on `cores` cores."""
    now = datetime.now(UTC)
    with engine.begin() as conn:
        dep = conn.execute(text(
            "INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, status, "
            "started_at, running_at, stopped_at) VALUES (:s, 'p', :c, 2, '{}', 'local', :ck, 'stopped', :t0, :t0, "
            ":t1) RETURNING id"),
            {"s": SID, "c": cores, "ck": stages.checkpoint_for(SID), "t0": now - timedelta(minutes=10),
             "t1": now - timedelta(seconds=60)}).scalar_one()
        for b in range(12):
            conn.execute(text(
                "INSERT INTO stage_metrics (ts, stage_id, deployment_id, run_id, batch_id, input_rows, "
                "batch_duration_ms, cores, backlog_files, backlog_rows) "
                "VALUES (:ts, :s, :d, 'r', :b, :n, :ms, :c, 0, 0)"),
                {"ts": now - timedelta(seconds=120 - every_s * b), "s": SID, "d": dep, "b": b, "n": rows,
                 "ms": batch_ms, "c": cores})
    return dep


def test_the_last_run_and_the_waiting_files_are_read(clean_db):
    reg = _registry("ss/read")
    stages.sync_registry(reg)
    _last_run(clean_db)  # 100 rows every 5 s = 20 rows/s; 100 rows in 2 busy core-s = 50 rows/s per core
    waiting = _waiting("ss/read")
    from streamops.execute import start_inputs

    _, _, st = reg.stage(SID)
    inp = start_inputs.gather(SID, st, "p", reg.pools["p"], stages.checkpoint_for(SID))
    assert inp.last_cores == 1 and 55 <= inp.last_age_s <= 120
    assert inp.input_rate == pytest.approx(20.0) and inp.rate_per_core == pytest.approx(50.0)
    assert not inp.rate_per_core_declared
    assert inp.backlog_rows == waiting  # every file unread, its lines counted
    assert inp.free_cores == 2 and inp.useful_cores is None
    got = _choose(reg)
    # (20 + 6,000 / 60) / (50 × 0.7) = 3.4 -> 4, capped at cores.max 2
    assert got.cores == 2 and got.estimate == 4
    assert got.reason.startswith("starts at 2 cores: 6,000 rows waiting (caught up in 60 s) + 20.0 rows/s "
                                 "measured over the last run, 50.0 rows/s per core (measured)"), got.reason


def test_a_first_start_is_sized_by_the_declared_rate_per_core(clean_db):
    reg = _registry("ss/first", per_core_rows_s=40)
    stages.sync_registry(reg)
    _waiting("ss/first", rows_per_s=100, seconds=20)  # 2,000 rows: 33 rows/s over 60 s, 28 rows/s a core
    got = _choose(reg)
    assert got.cores == 2, got.reason
    assert "2,000 rows waiting" in got.reason and "40.0 rows/s per core (declared)" in got.reason


def test_a_first_start_with_nothing_waiting_is_sized_by_the_declared_input_rate(clean_db):
    reg = _registry("ss/rate", source={"expected_rows_s": 50}, per_core_rows_s=40)
    stages.sync_registry(reg)
    got = _choose(reg)  # 50 rows/s over 40 × 0.7 = 28 rows/s a core: 2 cores
    assert got.cores == 2, got.reason
    assert got.reason == ("starts at 2 cores: 0 rows waiting (caught up in 60 s) + 50.0 rows/s declared, "
                          "40.0 rows/s per core (declared) at 70% utilization: 2 cores")


def test_no_history_and_no_declared_rate_start_at_cores_initial(clean_db):
    reg = _registry("ss/none")
    stages.sync_registry(reg)
    _waiting("ss/none", seconds=5)
    got = _choose(reg)
    assert got.cores == 1 and "no rows/s per core declared or measured" in got.reason


def test_a_start_leaves_the_pool_s_other_stages_room_for_their_floor(clean_db):
    """A deploy starts an app's stages one by one: the first must not take the cores the next one
    needs to start at its cores.initial (it would be refused)."""
    reg = _registry("ss/shared", sibling=True, per_core_rows_s=40)
    stages.sync_registry(reg)
    _waiting("ss/shared")
    got = _choose(reg)
    assert got.cores == 1 and got.estimate == 4
    assert got.reason.endswith("capped at the pool's 2 cores free (1 kept for its other stages' cores.initial)")


@pytest.mark.e2e
@pytest.mark.slow  # 72 s on 2 busy cores (a driver's start, first batch, stop); the DB tests above take its path
def test_a_start_with_a_waiting_backlog_begins_above_cores_initial(clean_db):
    """A real start (local pool, a real driver): its run is admitted at 2 cores, not cores.initial's 1,
    says why in its record, and its first batch runs on 2 cores."""
    reg = _registry("ss/real")
    stages.sync_registry(reg)
    _last_run(clean_db)
    _waiting("ss/real")
    run = stages.start_stage(SID, reg, wait_s=120, warm_up=False)
    try:
        with clean_db.connect() as conn:
            dep = conn.execute(text("SELECT * FROM deployments WHERE id = :i"), {"i": run.deployment_id}).one()
            assert dep.cores == 2 and dep.status == "running"
            reason = RunSpec.of(dep.config).start_size
            assert reason is not None and reason.startswith("starts at 2 cores: 6,000 rows waiting"), reason
            first = None
            deadline = datetime.now(UTC) + timedelta(seconds=60)
            while first is None and datetime.now(UTC) < deadline:
                first = conn.execute(text("SELECT cores FROM stage_metrics WHERE deployment_id = :i AND input_rows > 0 "
                                          "ORDER BY ts LIMIT 1"), {"i": run.deployment_id}).scalar()
                conn.commit()
            assert first == 2
    finally:
        stages.stop_stage(SID, reg, deadline_s=30)
