"""No input can stop a stage (issue 16): arbitrary lines through every workload's real parse and
sinks, a file of hand-made bad lines dropped into a running stage, and a batch that fails the
same way every time quarantined whole while the stage moves on."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from demo import oracles
from demo.stages import demo_job
from spark_apps.stage import start_stage_queries
from streamops import generator, registry
from streamops.agent.metrics import StageContext
from streamops.generator import SCHEMAS
from streamops.records import check_line
from tests.integration.test_e2e_stage import eventually

pytestmark = pytest.mark.db

WORKLOAD_FAMILY = {"identity": "web", "repartition": "web", "wordcount": "web", "fixwindow": "web",
                   "taxi_top10": "taxi", "patterns": "patterns", "keycount": "web"}


# -- lines: valid records, records with one field turned into anything, JSON values, raw bytes --------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8)
nasty_text = st.text() | st.sampled_from(["a\x00b", "\x00", "x\ud800y", "\udfff", "é ü", "a  b", " ", "", "\u2028",
                                          "w" * 3000])
timestamps = st.datetimes(min_value=datetime(1950, 1, 1), max_value=datetime(2150, 1, 1),
                          timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)),
                                                     timezone(timedelta(hours=-8))]))


def _field(family: str, name: str, typ: str):
    if typ == "timestamp":
        return timestamps.map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000).isoformat())
    if typ == "int":
        return st.integers(-(1 << 31), (1 << 31) - 1)
    if typ == "double":
        lo, hi = {n: (a, b) for n, a, b in SCHEMAS[family].ranges}.get(name, (-1e12, 1e12))
        return st.floats(lo, hi, allow_nan=False)
    return st.text(max_size=30) if name != "words" else \
        st.lists(st.sampled_from(["a", "b", "c", "ab"]), max_size=6).map(" ".join)


def records(family: str):
    return st.fixed_dictionaries({f: _field(family, f, t) for f, t in SCHEMAS[family].fields})


def broken(family: str):
    """A valid record with one field removed, or set to any JSON value or any text, or trailing junk."""
    def mutate(rec, name, how, value, junk):
        rec = dict(rec)
        if how == "drop":
            rec.pop(name)
        elif how == "value":
            rec[name] = value
        return json.dumps(rec, ensure_ascii=how != "raw").encode("utf-8", "surrogatepass") + junk
    return st.builds(mutate, records(family), st.sampled_from(sorted(SCHEMAS[family].types)),
                     st.sampled_from(["drop", "value", "raw", "text"]),
                     json_values | nasty_text, st.sampled_from([b"", b"", b" x", b"{}", b"\x00"]))


SAMPLE = {
    "web": {"id": "w-1", "ts": "2026-11-21T12:00:00.000Z", "ip": "10.0.0.9", "url": "/x", "status": 200, "user": "u9",
            "words": "zebra quagga"},
    "taxi": {"id": "t-1", "ts": "2026-11-21T12:00:00Z", "medallion": "m", "pickup_ts": "2026-11-21T11:50:00Z",
             "dropoff_ts": "2026-11-21T12:00:00Z", "pickup_lon": -73.98, "pickup_lat": 40.75, "dropoff_lon": -73.95,
             "dropoff_lat": 40.77, "fare": 12.5},
    "patterns": {"id": "p-1", "ts": "2026-11-21T12:00:00Z", "user": "u", "pattern": "A>B"},
}


def _one_valid(family: str) -> bytes:
    return json.dumps(SAMPLE[family]).encode()


def lines(family: str):
    one = st.one_of(records(family).map(lambda r: json.dumps(r).encode()), broken(family),
                    json_values.map(lambda v: json.dumps(v).encode()),
                    st.binary(max_size=80).map(lambda b: b.replace(b"\n", b" ").replace(b"\r", b" ")))
    return st.lists(one, min_size=1, max_size=30)


def _run_once(spark, stage: registry.Stage, sid: str, home: Path) -> None:
    inputs = registry.resolve_path(stage.source.path)
    ctx = StageContext(sid, None, 2, stage.state_partitions, stage.trigger_interval_ms)
    queries = start_stage_queries(spark, stage, ctx, inputs, home / "ckpt" / sid, available_now=True)
    for q in queries:
        q.awaitTermination(180)
        assert q.exception() is None, f"{q.name} failed: {q.exception()}"


@pytest.mark.parametrize("workload", sorted(WORKLOAD_FAMILY))
def test_any_line_is_counted_or_quarantined_with_its_reason(spark, clean_db, tmp_path, workload):
    family = WORKLOAD_FAMILY[workload]

    @settings(max_examples=int(os.environ.get("STREAMOPS_PROPERTY_EXAMPLES", 4)), deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
    @given(batch=lines(family))
    @example(batch=[_one_valid(family)] * 2)  # a producer's resend: one key twice in a batch
    @example(batch=[b"", b"{}", b"[1,2,3]", b"\xff\xfe", rb'{"id": "\u0000"}', b"a\x00b"])
    def prop(batch):
        sid = f"p.{workload}.{uuid.uuid4().hex[:8]}"
        path = f"prop/{sid}"
        inputs = registry.resolve_path(path)
        inputs.mkdir(parents=True)
        (inputs / "lines.json").write_bytes(b"\n".join(batch) + b"\n")
        stage = registry.Stage.model_validate({
            **demo_job(workload, {"kind": "files", "path": path}), "cores": {"initial": 1, "max": 2},
            "state_partitions": 2, "pool": "p"})
        _run_once(spark, stage, sid, tmp_path)

        verdicts = [check_line(SCHEMAS[family], b) for b in batch]
        valid = [json.loads(b) for b, v in zip(batch, verdicts, strict=True) if v.valid]
        assert oracles.actual(clean_db, sid, workload) == oracles.expected(workload, valid)
        with clean_db.connect() as conn:
            rows = conn.execute(text("SELECT raw, raw_bytes, reason_kind, reason FROM quarantine WHERE stage_id = :s"),
                                {"s": sid}).all()
        got = Counter((bytes(r.raw_bytes) if r.raw_bytes is not None else r.raw.encode(), r.reason) for r in rows)
        want = Counter((b, v.reason) for b, v in zip(batch, verdicts, strict=True) if not v.valid)
        assert got == want, "every line that is not a record is quarantined once, with the contract's reason"
        shutil.rmtree(inputs)

    prop()


# -- a running stage gets a file of hand-made bad lines -------------------------------------------------
VALID = {**SAMPLE["web"], "id": "bad-file-valid-1"}


def _bad_lines() -> list[tuple[bytes, str]]:
    """(line, the reason kind it must be quarantined for); None for the valid ones."""
    rec = lambda **kw: json.dumps({**VALID, "id": f"bad-{uuid.uuid4().hex[:6]}", **kw}).encode()  # noqa: E731
    return [
        (rec(words="nul\x00raw").replace(b"\\u0000", b"\x00"), "NUL byte"),
        (rec(words="nul\x00escaped"), "NUL byte"),
        (rec(words=12345), "wrong type"),
        (rec(words="caf").replace(b'"caf"', b'"caf\xc3\x28"'), "invalid UTF-8"),
        (rec(words="x" * (5 << 20)), "too large"),
        (b"{}", "empty JSON object"),
        (b"[1,2,3]", "not a JSON object"),
        (b"", "empty line"),
        (b"{}", "empty JSON object"),            # an equal bad line is its own row
        (rec(words="w" * 3000), None),            # a 3 kB word: a key no btree entry could hold as it is
        (rec(words="a\ud800b"), "invalid UTF-8"),
        (rec(status=1 << 40), "out of range"),
        (rec() + b"trailing", "malformed JSON"),
        (json.dumps(VALID).encode(), None),
    ]


def _registry(name: str, **extra) -> registry.Registry:
    """One stage `poison.<name>` reading `poison/<name>` (its own checkpoint: tests share a home)."""
    path = f"poison/{name}"
    stage = {**demo_job("wordcount", {"kind": "files", "path": path, "max_files_per_trigger": 2}),
             "cores": {"initial": 1, "max": 2}, "state_partitions": 2, "trigger_interval_ms": 1000, "pool": "p",
             **extra}
    return registry.parse({"pools": {"p": {"cores": 2}}, "apps": {"poison": {
        "r_max_ms": 5000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30}, "stages": {name: stage}}}})


def _drop(inputs: Path, name: str, lines: list[bytes]) -> Path:
    tmp = inputs / f".{name}.tmp"
    tmp.write_bytes(b"\n".join(lines) + b"\n")
    os.replace(tmp, inputs / name)
    return inputs / name


def _commits(engine, sid):
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM sink_commits WHERE stage_id = :s"), {"s": sid}).scalar_one()


@pytest.mark.e2e
def test_a_file_of_bad_lines_leaves_a_running_stage_committing(clean_db):
    from streamops.execute import stages

    reg, sid = _registry("bad"), "poison.bad"
    inputs = registry.resolve_path("poison/bad")
    generator.generate(inputs, "web", "constant:rate=100", seed=31, duration_s=6, realtime=False)
    run = stages.start_stage(sid, reg)
    eventually(lambda: _commits(clean_db, sid) >= 2, 120, "the first commits")
    bad = _bad_lines()
    _drop(inputs, "zz-bad-lines.json", [b for b, _ in bad])
    before = _commits(clean_db, sid)
    generator.generate(inputs, "web", "constant:rate=100", seed=31, duration_s=12, realtime=False)  # later files

    valid = list(generator.read_valid_records(inputs)) + [json.loads(b) for b, k in bad if k is None]
    want = oracles.expected("wordcount", valid)
    eventually(lambda: oracles.actual(clean_db, sid, "wordcount") == want, 180,
               "the sink to equal the ground truth of every valid line")
    assert _commits(clean_db, sid) > before, "the stage kept committing after the bad file"
    with clean_db.connect() as conn:
        rows = conn.execute(text("SELECT raw, raw_bytes, raw_size, reason_kind, reason FROM quarantine "
                                 "WHERE stage_id = :s AND source_file LIKE '%zz-bad-lines.json'"), {"s": sid}).all()
        dep = conn.execute(text("SELECT status FROM deployments WHERE id = :i"), {"i": run.deployment_id}).scalar_one()
        failures = conn.execute(text("SELECT count(*) FROM failures WHERE stage_id = :s"), {"s": sid}).scalar_one()
    assert dep == "running" and failures == 0, "no batch failed and no restart was needed"
    got = Counter((bytes(r.raw_bytes) if r.raw_bytes is not None else r.raw.encode(), r.reason_kind) for r in rows)
    assert got == Counter((b, k) for b, k in bad if k), "each bad line once, with its reason"
    assert all(r.raw_size == len(bytes(r.raw_bytes) if r.raw_bytes is not None else r.raw.encode()) for r in rows)
    stages.stop_stage(sid, reg, deadline_s=30)


# Words of the poison batch beside POISON: some land in the state partitions that do not fail.
BYSTANDERS = [f"bystander{i}" for i in range(12)]


@pytest.mark.e2e
def test_a_batch_that_always_fails_is_bisected_its_poison_file_quarantined_and_the_stage_moves_on(clean_db):
    """The injected fault gives the output key POISONa a value PostgreSQL refuses, as a NUL byte
    once did: that partition's write fails in the executor after the other partition wrote its
    rows. The first batch holds a valid companion file and the poison file. It is retried, then
    bisected by dry runs: only the poison file is quarantined, the companion is counted, later
    files are counted, and the poison file's bystander words are not in the sink.
    Before, the failed tries' first partition stayed in the sink (bystanders counted, and their
    inflated counts outranked the replay's), and the companion file was quarantined with the pill."""
    from streamops.cli import status_table
    from streamops.execute import stages

    reg, sid = _registry("pill"), "poison.pill"
    inputs = registry.resolve_path("poison/pill")
    inputs.mkdir(parents=True, exist_ok=True)
    companion = _drop(inputs, "aa-companion.json",
                      [json.dumps({**VALID, "id": "c-1", "words": "companion word"}).encode()])
    # POISONa hashes to the second of the 2 state partitions: on one core the first partition,
    # with bystanders 1, 2, 3, 8 and 11, is written before the failure.
    pill = _drop(inputs, "ab-pill.json",
                 [json.dumps({**VALID, "id": "pill-1", "words": "POISONa pill"}).encode(),
                  json.dumps({**VALID, "id": "pill-2", "words": " ".join(BYSTANDERS)}).encode()])
    then = datetime.now().timestamp() - 600  # the two oldest files: the first batch (2 files per trigger)
    os.utime(companion, (then, then))
    os.utime(pill, (then + 1, then + 1))
    generator.generate(inputs, "web", "constant:rate=100", seed=32, duration_s=4, realtime=False)
    run = stages.start_stage(sid, reg, fault="poison_marker")

    def quarantined():
        with clean_db.connect() as conn:
            return conn.execute(text("SELECT * FROM batch_failures WHERE stage_id = :s "
                                     "AND status = 'quarantined'"), {"s": sid}).first()
    bf = eventually(quarantined, 180, "the poison batch to be quarantined")
    generator.generate(inputs, "web", "constant:rate=100", seed=32, duration_s=10, realtime=False)  # later files

    poisoned = {Path(f).name for f in (bf.quarantined_files or bf.files)}
    valid = [json.loads(line) for f in sorted(inputs.glob("*.json")) if f.name not in poisoned
             for line in f.read_bytes().splitlines() if check_line(SCHEMAS["web"], line).valid]
    want = oracles.expected("wordcount", valid)
    eventually(lambda: oracles.actual(clean_db, sid, "wordcount") == want, 180,
               "the sink to equal the ground truth without the quarantined file")
    with clean_db.connect() as conn:
        left = conn.execute(text("SELECT key FROM sink_outputs WHERE stage_id = :s AND key LIKE 'bystander%'"),
                            {"s": sid}).scalars().all()
    assert left == [], "a failed try's partitions left their rows in the sink"
    assert {Path(f).name for f in bf.files} == {companion.name, pill.name}, "the first batch held both files"
    assert poisoned == {pill.name}, "only the file that fails alone is quarantined"
    assert bf.attempts == 3 and "type json" in bf.error
    with clean_db.connect() as conn:
        q = conn.execute(text("SELECT reason_kind, reason, source_file FROM quarantine WHERE stage_id = :s "
                              "AND reason_kind = 'batch failed'"), {"s": sid}).all()
        failure = conn.execute(text("SELECT kind, status, attempts, detail, mttr_ms FROM failures "
                                    "WHERE stage_id = :s"), {"s": sid}).one()
        dep = conn.execute(text("SELECT status FROM deployments WHERE id = :i"), {"i": run.deployment_id}).scalar_one()
    assert len(q) == 2 == bf.quarantined_rows and {Path(r.source_file).name for r in q} == {pill.name}, \
        "every line of the poison file, once, and none of its companion's"
    assert all("failed 3 times" in r.reason and "type json" in r.reason and "failed the same way alone" in r.reason
               for r in q)
    assert failure.kind == "batch_failed" and failure.status == "recovered" and failure.mttr_ms > 0, failure
    assert dep == "running", "the driver retried and moved on by itself: no watchdog restart"
    assert "1 of its 2 file(s) quarantined" in str(status_table().caption)
    stages.stop_stage(sid, reg, deadline_s=30)


@pytest.mark.db
def test_each_replica_counts_its_own_failed_batches(clean_db):
    """Replicas have checkpoints of their own: batch 5 of replica-1 is not batch 5 of the primary.
    One's failure must neither reset the other's count nor overwrite its `quarantined` row."""
    from streamops.agent.poison import FailedBatch, PoisonBook
    from streamops.execute import stages

    reg, sid = _registry("roles"), "poison.roles"
    stages.sync_registry(reg)
    primary = PoisonBook(None, sid, None, "web", 1 << 20, role="primary")
    replica = PoisonBook(None, sid, None, "web", 1 << 20, role="replica-1")
    for _ in range(3):
        verdict = primary.record(FailedBatch("main", 5, ("/in/a.json",), "RuntimeError: boom"), poison_after=3)
        replica.record(FailedBatch("main", 5, ("/in/b.json",), "RuntimeError: other"), poison_after=5)
    assert verdict.action == "quarantine"
    with clean_db.begin() as conn:  # what quarantine_whole marks, without its file reads
        conn.execute(text("UPDATE batch_failures SET status = 'quarantined' WHERE stage_id = :s AND role = 'primary'"),
                     {"s": sid})
    replica.committed("main", 5)
    with clean_db.connect() as conn:
        rows = {r.role: r for r in conn.execute(text(
            "SELECT role, files, attempts, status FROM batch_failures WHERE stage_id = :s"), {"s": sid})}
    assert rows["primary"].status == "quarantined" and rows["primary"].files == ["/in/a.json"]
    assert rows["primary"].attempts == 3 and rows["replica-1"].attempts == 3
    assert rows["replica-1"].status == "passed"
