"""Kafka stages' operations against a real embedded broker (one for the module): records deleted
before a stopped stage read them are a `data_lost` failure naming the topic, partitions and
ranges, never a silent skip; `streamops gen` produces to a Kafka stage's topic; the supervisor
heals a killed broker (`broker_lost`); a broker killed, then stopped for 60 s, under a fed stage
leaves its sink equal to the topic."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from streamops import kafka_broker
from streamops.generator import SCHEMAS, sample_lines
from tests.integration.test_kafka_broker import _conf, _produce, _read_topic, _topic

pytest.importorskip("confluent_kafka")
from confluent_kafka import TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402


@pytest.fixture(scope="module")
def broker(test_home):
    b, _ = kafka_broker.up()
    yield b
    kafka_broker.down()


def _records(n: int, seed: int) -> list[tuple[str, str]]:
    import random

    now = datetime.now(UTC)
    lines = sample_lines(SCHEMAS["web"], n, rng=random.Random(seed), ts_from=now - timedelta(seconds=5), ts_to=now)
    return [(json.loads(line)["id"], line) for line in lines]


def _wordcount_stage(topic: str, app: str = "k", **source):
    """A wordcount stage `app.wc` over `topic`; each test its own app: a stage's checkpoint (in the
    session's home) holds its topic's offsets."""
    from demo.stages import demo_job
    from streamops import registry

    stage = {**demo_job("wordcount", {"kind": "kafka", "topic": topic, "max_offsets_per_trigger": 1000, **source}),
             "cores": {"initial": 1, "max": 1}, "state_partitions": 2, "trigger_interval_ms": 1000, "pool": "p"}
    return registry.parse({"pools": {"p": {"cores": 2, "spark_ui": False}},
                           "apps": {app: {"r_max_ms": 5000, "maintenance_window": {"cron": "0 3 * * *",
                                                                                    "duration_min": 30},
                                          "stages": {"wc": stage}}}})


@pytest.mark.e2e
@pytest.mark.db
def test_records_deleted_before_a_stopped_stage_read_them_are_a_data_lost_failure(broker, clean_db):
    """A stage reads 40 records of a 2-partition topic and is stopped; 40 more are written, then
    deleted (delete-records: partition 0 up to 40, partition 1 up to 30) before it starts again.
    Its run fails at once (failOnDataLoss=true); the watchdog records `data_lost` with the topic,
    both partitions and their exact ranges, gives it up (no restart into the same error), and
    `status` says so with the way on."""
    from demo.oracles import actual, expected
    from streamops import status_view
    from streamops.execute import stages, watchdog
    from streamops.store import db, ledger
    from tests.integration.test_e2e_stage import eventually

    # its own app: test_kafka_broker's stage is k.wc, and a session's checkpoints outlive a test
    topic, sid = _topic(partitions=2), "dl.wc"
    reg = _wordcount_stage(topic, app="dl")
    first = _records(40, 1)
    _produce(topic, first, partitions=2)
    started = time.monotonic()
    run = stages.start_stage(sid, reg, warm_up=False)
    want = expected("wordcount", [json.loads(v) for _, v in first])
    eventually(lambda: actual(clean_db, sid, "wordcount") == want, 150, "the first 40 records counted")
    stages.stop_stage(sid, reg, deadline_s=30)
    _produce(topic, _records(40, 2), partitions=2)  # offsets 20..39 of each partition
    admin = AdminClient(_conf())
    for f in admin.delete_records([TopicPartition(topic, 0, 40), TopicPartition(topic, 1, 30)]).values():
        f.result(timeout=30)
    _produce(topic, _records(10, 3), partitions=2)  # records after the gap: it is not the end of the topic
    run = stages.start_stage(sid, reg, warm_up=False)
    dep = eventually(lambda: (d := ledger.deployment(run.deployment_id)).status == "failed" and d, 150,
                     "the run to fail on the lost offsets")
    failed_in = time.monotonic() - started
    assert "data lost:" in dep.stop_reason, dep.stop_reason
    report = watchdog.cycle(reg, stale_s=60)
    [rec] = [r for r in report.recoveries if r.stage_id == sid]
    assert (rec.kind, rec.status, rec.attempts) == ("data_lost", "gave_up", 0), rec

    with clean_db.connect() as conn:
        from sqlalchemy import text

        row = conn.execute(text("SELECT kind, status, detail FROM failures WHERE stage_id = :s"), {"s": sid}).one()
    assert (row.kind, row.status) == ("data_lost", "gave_up")
    assert f"topic {topic}, partitions 0, 1: offsets {topic}/0 [20, 40), {topic}/1 [20, 30)" in row.detail, row.detail
    assert ledger.latest_run(sid).id == run.deployment_id, "not restarted into the same error"
    assert not watchdog.cycle(reg, stale_s=60).recoveries, "a second pass leaves it given up"
    [st] = [r for r in db.rows("stage_status") if r.stage_id == sid]
    _, notes = status_view.cells(st)
    assert st.health == "failed" and any(f"{topic}/1 [20, 30)" in n and "fail_on_data_loss" in n for n in notes), notes
    # The documented way on: skip the gap for one start, and every record left is counted.
    stages.start_stage(sid, _wordcount_stage(topic, app="dl", fail_on_data_loss=False), warm_up=False)
    left = [json.loads(m.value()) for m in _read_topic(topic, 20)]  # p0 40..44, p1 30..44
    want = expected("wordcount", [json.loads(v) for _, v in first] + left)
    try:
        eventually(lambda: actual(clean_db, sid, "wordcount") == want, 150, "the records after the gap counted")
    finally:
        stages.stop_stage(sid, reg, deadline_s=30)
    print(f"failed with data_lost {failed_in:.1f}s after the first start: {row.detail}")


def test_gen_produces_a_traced_rate_to_a_kafka_stages_topic_over_its_partitions(broker, tmp_path, monkeypatch):
    """`streamops gen` for a Kafka stage: the topic is created with the partitions asked for, each
    generated line is one message keyed by its record's id (spread over every partition), the count
    is the trace's, and the garbage share arrives as bad messages that check_line refuses."""
    import yaml
    from typer.testing import CliRunner

    from demo.stages import demo_job
    from streamops import cli, registry
    from streamops.records import check_line

    topic = f"gen-{int(time.time() * 1000)}"
    stage = {**demo_job("wordcount", {"kind": "kafka", "topic": topic}), "pool": "p", "cores": {"initial": 1, "max": 1}}
    apps = tmp_path / "apps.yaml"
    apps.write_text(yaml.safe_dump({"pools": {"p": {"cores": 2}}, "apps": {"k": {
        "r_max_ms": 5000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30}, "stages": {"wc": stage}}}}))
    monkeypatch.setenv("STREAMOPS_APPS", str(apps))
    res = CliRunner().invoke(cli.app, ["gen", "k.wc", "--trace", "constant:rate=300", "--duration", "4", "--fast",
                                       "--garbage", "0.05", "--seed", "3", "--partitions", "3"])
    assert res.exit_code == 0, res.output
    messages = _read_topic(topic, 1200)
    schema = registry.load().stage("k.wc")[2].record_schema
    valid = [m for m in messages if check_line(schema, m.value(), 1 << 20).valid]
    bad = len(messages) - len(valid)
    assert len(AdminClient(_conf()).list_topics(topic, timeout=10).topics[topic].partitions) == 3
    assert {m.partition() for m in messages} == {0, 1, 2}
    assert all(m.key() == json.loads(m.value())["id"].encode() for m in valid), "keyed by the record's id"
    assert "1200 rows (" in res.output and f"({bad} malformed)" in res.output, res.output
    assert 30 <= bad <= 100, bad  # 5 % of 1 200, give or take the draw
    per = {p: sum(1 for m in messages if m.partition() == p) for p in range(3)}
    print(f"1200 messages over 3 partitions {per}, {bad} malformed: {res.output.splitlines()[-1]}")


def _failure(engine, sid: str, kind: str):
    from sqlalchemy import text

    with engine.connect() as conn:
        return conn.execute(text("SELECT * FROM failures WHERE stage_id = :s AND kind = :k ORDER BY id DESC LIMIT 1"),
                            {"s": sid, "k": kind}).first()


# 40 s: heal() on its port is test_kafka_broker's (make test); under a stage, make test-chaos's
@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.chaos
@pytest.mark.db
def test_the_supervisor_heals_a_killed_broker_under_a_running_stage(broker, clean_db):
    """kill -9 of the embedded broker under a Kafka stage fed with records: the supervisor's next
    housekeeping pass restarts it on its port, records one `broker_lost` failure for the stage
    timed from the pass that last saw the broker alive, and closes it at the stage's first commit
    after the heal."""
    import os
    import signal

    import psutil

    from streamops.execute import stages
    from streamops.execute.supervisor import Supervisor, SupervisorOptions
    from tests.integration.test_e2e_stage import eventually
    from tests.integration.test_kafka_broker import TopicFeeder, _commits

    topic, sid = _topic(partitions=2), "h.wc"
    reg = _wordcount_stage(topic, app="h")
    sup = Supervisor(reg, SupervisorOptions(warm_spares=False))
    with TopicFeeder(topic):
        stages.start_stage(sid, reg, warm_up=False)
        try:
            eventually(lambda: _commits(clean_db, sid) >= 1, 150, "a first commit")
            sup.housekeeping()  # a pass that sees the broker alive
            before = kafka_broker.load_record()
            killed_at = datetime.now(UTC)
            os.kill(before.pid, signal.SIGKILL)
            psutil.Process(before.pid).wait(10)
            started = time.monotonic()
            sup.housekeeping()
            healed_s = time.monotonic() - started
            after = kafka_broker.load_record()
            assert after.pid != before.pid and after.port == before.port and kafka_broker.is_running(after)
            row = _failure(clean_db, sid, "broker_lost")
            assert row is not None and row.status == "recovering" and row.detected_by == "supervisor", row
            assert row.failed_at <= killed_at and str(after.port) in row.detail, row
            commits = _commits(clean_db, sid)

            def closed():
                sup.housekeeping()
                return _failure(clean_db, sid, "broker_lost").status == "recovered"

            eventually(closed, 150, "the broker_lost failure closed at the stage's next commit")
            assert _commits(clean_db, sid) > commits
        finally:
            stages.stop_stage(sid, reg, deadline_s=30)
    row = _failure(clean_db, sid, "broker_lost")
    print(f"broker healed in {healed_s:.1f}s on port {after.port}; broker_lost MTTR {row.mttr_ms / 1000:.1f}s "
          f"(from the last sighting to the stage's first commit after the heal)")


@pytest.mark.slow  # 106 s (60 of them the stop): `make test-chaos`, not `make test`'s 25 minutes
@pytest.mark.e2e
@pytest.mark.chaos
@pytest.mark.db
def test_the_sink_equals_the_topic_after_a_broker_kill_and_a_60s_stop(broker, clean_db):
    """The broker under a fed wordcount stage, killed with kill -9 and restarted on its port, then
    stopped (SIGSTOP) for 60 s and resumed: the stage goes on by itself (its consumer retries; the
    offsets are in the checkpoint), and the sink equals an oracle that reads the topic with its own
    client. Whatever the producer had acknowledged is in the topic, and is counted exactly once."""
    import os
    import signal

    import psutil

    from streamops.execute import stages
    from tests.integration.test_e2e_stage import eventually
    from tests.integration.test_kafka_broker import TopicFeeder, _commits, settle_against_topic

    topic, sid = _topic(partitions=2), "bf.wc"
    reg = _wordcount_stage(topic, app="bf")
    marks: list[str] = []
    started = time.monotonic()
    with TopicFeeder(topic, seed=11) as feeder:
        stages.start_stage(sid, reg, warm_up=False)
        try:
            eventually(lambda: _commits(clean_db, sid) >= 2, 150, "two commits")
            before = kafka_broker.load_record()
            os.kill(before.pid, signal.SIGKILL)
            psutil.Process(before.pid).wait(10)
            marks.append(f"killed at {time.monotonic() - started:.0f}s")
            time.sleep(5)
            after, _ = kafka_broker.up()
            assert after.port == before.port
            commits = _commits(clean_db, sid)
            eventually(lambda: _commits(clean_db, sid) > commits + 1, 180, "commits after the restart")
            marks.append(f"committing again at {time.monotonic() - started:.0f}s")
            os.kill(after.pid, signal.SIGSTOP)
            marks.append(f"stopped at {time.monotonic() - started:.0f}s")
            try:
                time.sleep(60)
            finally:
                os.kill(after.pid, signal.SIGCONT)
            commits = _commits(clean_db, sid)
            eventually(lambda: _commits(clean_db, sid) > commits + 1, 180, "commits after the resume")
            marks.append(f"committing again at {time.monotonic() - started:.0f}s")
            messages, want = settle_against_topic(clean_db, sid, feeder, topic)
        finally:
            stages.stop_stage(sid, reg, deadline_s=30)
    print(f"{len(messages)} messages, {sum(want.values())} words: sink = oracle; {', '.join(marks)}")
