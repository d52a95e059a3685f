"""A Kafka stage's lag, recorded by its driver's agent, is the backlog everything reads: the
operator's window (StageStats.backlog_rows, and the partitions' bound on cores), `status`, the
Prometheus exporter, and a manual change's check. A real database; no broker, no Spark (the
agent is fed a progress report as Spark's listener hands it over)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from sqlalchemy import text

from demo.stages import demo_job
from streamops import control, registry
from streamops.agent.agent import StageAgent
from streamops.agent.metrics import StageContext
from streamops.execute import stages
from streamops.plan.change import InvalidChange, validate_change
from streamops.plan.options import OperatorOptions
from streamops.report import prometheus
from streamops.store import db
from tests.unit.test_kafka_source import PROGRESS

pytestmark = pytest.mark.db


def test_a_recorded_lag_is_the_stage_s_backlog_and_its_partitions_bound_its_cores(clean_db, tmp_path):
    reg = registry.parse({"pools": {"p": {"cores": 8}}, "apps": {"k": {
        "r_max_ms": 3000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
        "stages": {"s": {**demo_job("wordcount", {"kind": "kafka", "topic": "clicks"}),
                         "cores": {"initial": 1, "max": 4}, "pool": "p"}}}}})
    stages.sync_registry(reg)
    spec = reg.apps["k"].stages["s"].model_dump(mode="json", by_alias=True)
    now = datetime.now(UTC)
    with clean_db.begin() as conn:
        dep = conn.execute(text(
            "INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, status, "
            "started_at, running_at) VALUES ('k.s', 'p', 1, 4, CAST(:c AS jsonb), 'local', '/c', 'running', :t, :t) "
            "RETURNING id"), {"c": json.dumps({"spec": spec}), "t": now - timedelta(minutes=5)}).scalar_one()
    spark = SimpleNamespace(sparkContext=SimpleNamespace(master="local[1]"))
    agent = StageAgent(spark, StageContext("k.s", dep, 1, 4, 1000), None, tmp_path / "ckpt")
    agent.writer.start()
    progress = copy.deepcopy(PROGRESS)
    progress.update(timestamp=(now - timedelta(seconds=10)).isoformat(), runId="r1",
                    durationMs={"triggerExecution": 900})
    agent.on_progress(progress)
    agent._beat()
    agent.writer.close()

    with clean_db.connect() as conn:
        m = conn.execute(text("SELECT backlog_rows, backlog_files, source_lag FROM stage_metrics "
                              "WHERE deployment_id = :d"), {"d": dep}).one()
    assert (m.backlog_rows, m.backlog_files) == (3148, None)
    assert m.source_lag["end_offsets"] == {"clicks/0": 1000, "clicks/1": 980}
    assert (m.source_lag["avg_offsets_behind_latest"], m.source_lag["max_offsets_behind_latest"]) == (1574.0, 1648)

    with clean_db.connect() as conn:  # the operator's window: the lag is the backlog, 2 partitions the bound
        (stats, _), = control.load_windows(conn, now, OperatorOptions(stabilization_s=0), app="k")
    assert (stats.backlog_rows, stats.max_useful_cores, stats.core_cap) == (3148, 2, 2)
    status = {r.stage_id: r for r in db.rows("stage_status")}["k.s"]
    assert status.backlog_rows == 3148
    run, = prometheus.read(now).runs
    assert (run.backlog_rows, run.source_lag_records) == (3148, 3148)

    current = stages.current("k.s")
    assert current.max_useful_cores == 2
    with pytest.raises(InvalidChange, match="it reads in 2 tasks"):
        validate_change(reg, "k.s", "scale_out", cores=3, current=current)
    assert validate_change(reg, "k.s", "scale_out", cores=2, current=current).cores == 2
