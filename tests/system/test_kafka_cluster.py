"""A Kafka stage on the embedded Spark standalone cluster (issue 45): the connector's jars reach
the executors through `spark.jars`; a burst's lag makes its own Operator Manager ask for a
scale-out, which the Application Manager grants and the cluster realizes live; a kill -9 of its
driver in the middle of a scale-out loses and doubles nothing. Each sink equals an oracle that
reads the topic with its own client."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from sqlalchemy import text

from demo.stages import demo_job
from streamops import kafka_broker, quality, registry
from streamops.execute import reconfigure, stages, watchdog
from streamops.store import ledger
from tests.integration.test_e2e_stage import eventually

pytest.importorskip("confluent_kafka")
from tests.integration.test_kafka_broker import TopicFeeder, _commits, _topic, settle_against_topic  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.db,
              pytest.mark.slow]  # a cluster driver's start (and a kill and a restart): `make test-all`


@pytest.fixture(scope="module")
def broker(test_home):
    b, _ = kafka_broker.up()
    yield b
    kafka_broker.down()


def _registry(topic: str, app: str = "kc", max_offsets: int = 1000, policy: dict | None = None) -> registry.Registry:
    stage = {**demo_job("wordcount", {"kind": "kafka", "topic": topic, "max_offsets_per_trigger": max_offsets}),
             "cores": {"initial": 1, "max": 2}, "state_partitions": 2, "trigger_interval_ms": 1000,
             "pool": "cluster", "policy": policy or {"kind": "edf"}}
    return registry.parse({
        "pools": {"cluster": {"master": "embedded", "cores": 2, "executor_cores": 1, "executor_memory": "512m"}},
        "apps": {app: {"r_max_ms": 5000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                       "stages": {"wc": stage}}},
    })


def test_a_topic_s_lag_drives_a_scale_out_granted_and_realized_live_on_the_cluster(
        clean_db, spark_standalone, broker):
    """A steady feed, then a burst of 150 000 records: the stage's lag is its backlog, its driver's
    Operator Manager (DS2, 10 s to catch up) asks for a scale-out whose reason names the lag, the
    re-plan grants it, and it runs live (one run throughout, 2 cores). The sink equals the topic."""
    from streamops.orchestrate import tasks
    from tests.integration.test_kafka_broker import _produce
    from tests.integration.test_kafka_ops import _records

    topic, sid = _topic(partitions=2), "kl.wc"
    params = {"window_s": 20, "stabilization_s": 5, "local_period_s": 5, "min_window_fill": 0.5, "catch_up_s": 10}
    reg = _registry(topic, app="kl", max_offsets=10_000, policy={"kind": "ds2", "params": params})
    with TopicFeeder(topic, seed=17) as feeder:
        first = stages.start_stage(sid, reg, wait_s=180, warm_up=False)
        try:
            eventually(lambda: _commits(clean_db, sid) >= 3, 150, "three commits on the cluster")
            burst = _records(150_000, seed=18)
            _produce(topic, burst, partitions=2)
            feeder.sent += len(burst)
            eventually(lambda: _lag_request(clean_db, sid), 120, "a scale-out asked for because of the lag")
            [conf] = tasks.replan("kl")  # what streamops_replan hands to streamops_reconfigure
            decision = _decision(clean_db, sid)
            assert decision.outcome == "granted" and "backlog" in decision.reason, decision
            out = reconfigure.realize(conf["reconfiguration"], gate=quality.gate_new_run, reg=reg, stage_id=sid)
            assert out.status == "done", out
            live = ledger.latest_run(sid, live=True)
            assert (live.id, live.cores) == (first.deployment_id, 2), "the same run, now on 2 cores"
            mechanism = _mechanism(clean_db, conf["reconfiguration"])
            assert mechanism == "live", mechanism
            messages, want = settle_against_topic(clean_db, sid, feeder, topic)
        finally:
            stages.stop_stage(sid, reg, deadline_s=30)
    print(f"lag-driven: {decision.reason}; granted: {decision.decision_reason}; live scale-out "
          f"{out.seconds:.1f}s, output gap {out.downtime_ms or 0:.0f} ms; {len(messages)} messages: sink = oracle")


def _lag_request(engine, sid: str) -> bool:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM requests WHERE stage_id = :s AND action = 'scale_out' "
                                 "AND status = 'open' AND reason LIKE '%backlog%'"), {"s": sid}).scalar_one() > 0


def _decision(engine, sid: str):
    with engine.connect() as conn:
        return conn.execute(text("SELECT d.outcome, d.reason AS decision_reason, r.reason FROM decisions d "
                                 "JOIN requests r ON r.id = d.request_id WHERE d.stage_id = :s "
                                 "AND d.action = 'scale_out' ORDER BY d.id DESC LIMIT 1"), {"s": sid}).one()


def _mechanism(engine, rid: int) -> str:
    with engine.connect() as conn:
        return conn.execute(text("SELECT mechanism FROM reconfigurations WHERE id = :i"), {"i": rid}).scalar_one()


@pytest.mark.chaos  # `make test-chaos`
def test_a_kafka_stage_on_the_cluster_loses_nothing_when_its_driver_dies_mid_scale_out(
        clean_db, spark_standalone, broker):
    topic, sid = _topic(partitions=2), "kc.wc"
    reg = _registry(topic)
    marks: list[str] = []
    started = time.monotonic()
    with TopicFeeder(topic, seed=13) as feeder:
        first = stages.start_stage(sid, reg, wait_s=180, warm_up=False)
        try:
            eventually(lambda: _commits(clean_db, sid) >= 2, 150, "two commits on the cluster")
            rid = reconfigure.request(sid, "scale_out", cores=2, mechanism="live", reg=reg, requested_by="test")
            outcome = {}
            change = threading.Thread(target=lambda: outcome.update(
                o=reconfigure.execute(rid, gate=quality.gate_new_run, reg=reg)), daemon=True)
            change.start()
            eventually(lambda: _scale_requested(clean_db, rid), 60, "the executors asked for")
            os.killpg(first.pid, signal.SIGKILL)  # the driver and its JVM, mid-way through the scale-out
            marks.append(f"killed at {time.monotonic() - started:.0f}s")
            change.join(300)
            assert not change.is_alive(), "the reconfiguration returned"
            out = outcome["o"]
            marks.append(f"reconfiguration {out.status} at {time.monotonic() - started:.0f}s: {out.detail[:90]}")
            print(marks)
            # Its driver's death is seen within seconds, and the rollback restarts the run at once (it
            # once waited out the command's 90 s and left the restart to the watchdog's next pass).
            assert out.status == "rolled_back" and "died before it carried out the scale" in out.detail, out
            commits = _commits(clean_db, sid)

            def recovered() -> bool:  # the watchdog's passes, as the supervisor makes them
                watchdog.cycle(reg, stale_s=60)
                return _commits(clean_db, sid) > commits + 1

            eventually(recovered, 240, "commits after the kill", interval=2)
            live = ledger.latest_run(sid, live=True)
            marks.append(f"committing again at {time.monotonic() - started:.0f}s (deployment {live.id}, "
                         f"{live.cores} cores)")
            messages, want = settle_against_topic(clean_db, sid, feeder, topic)
        finally:
            stages.stop_stage(sid, reg, deadline_s=30)
    with clean_db.connect() as conn:
        runs = conn.execute(text("SELECT count(*) FROM deployments WHERE stage_id = :s AND role = 'primary' "
                                 "AND status IN ('starting', 'running')"), {"s": sid}).scalar_one()
    assert runs == 0, "every run stopped: no second primary was left behind"
    print(f"{len(messages)} messages, {sum(want.values())} words: sink = oracle; {'; '.join(marks)}")


def _scale_requested(engine, rid: int) -> bool:
    with engine.connect() as conn:
        return conn.execute(text("SELECT scale_requested_at IS NOT NULL FROM reconfigurations WHERE id = :i"),
                            {"i": rid}).scalar_one()
