"""A torn checkpoint (issue 48): its newest unreadable log entries are moved aside and named, the
stage resumes from the last intact batch; a torn entry in the middle is refused with the file
named; reading a torn file never raises a bare JSONDecodeError. Pure: a checkpoint written here in
Spark's own format (copied from a real one, Spark 4.3), no Spark."""

from __future__ import annotations

import json
import logging
import struct
from pathlib import Path

import pytest

from streamops import checkpoint_layout as layout
from streamops import checkpoint_repair as repair

CONF = {"spark.sql.shuffle.partitions": "2",
        "spark.sql.streaming.stateStore.providerClass": layout.ROCKSDB_PROVIDER}


def _write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    (path.parent / f".{path.name}.crc").write_bytes(b"crc\x00\x00\x02\x00\x00")  # Hadoop's checksum beside it


def _schema() -> bytes:
    """state/<op>/<partition>/_metadata/schema: writeUTF("v2"), then key and value schemas, each
    an int count of chunks and the chunks as writeUTF."""
    out = struct.pack(">H", 2) + b"v2"
    for field in ("w", "count"):
        chunk = json.dumps({"type": "struct", "fields": [{"name": field, "type": "string"}]}).encode()
        out += struct.pack(">i", 1) + struct.pack(">H", len(chunk)) + chunk
    return out


def spark_checkpoint(ckpt: Path, batches: int = 4) -> Path:
    """A stateful file-source query's checkpoint after `batches` committed batches, as Spark 4.3
    writes it (no trailing newline in a log entry)."""
    _write(ckpt / "metadata", '{"id":"2fc57102-4112-45ed-9372-914d496a46f1"}')
    for n in range(batches):
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1795812873812 + n, "conf": CONF}
        _write(ckpt / "offsets" / str(n), f'v1\n{json.dumps(meta)}\n{{"logOffset":{n}}}')
        _write(ckpt / "commits" / str(n), 'v1\n{"nextBatchWatermarkMs":0}')
        _write(ckpt / "sources" / "0" / str(n),
               f'v1\n{{"path":"file:///in/f{n}.json","timestamp":1795812831097,"batchId":{n}}}')
        for p in range(2):
            _write(ckpt / "state" / "0" / str(p) / f"{n + 1}.zip", b"PK\x03\x04")
    _write(ckpt / "state" / "0" / "_metadata" / "metadata",
           'v1\n{"operatorInfo":{"operatorId":0,"operatorName":"stateStoreSave"},'
           '"stateStoreInfo":[{"storeName":"default","numColsPrefixKey":0,"numPartitions":2}]}')
    for p in range(2):
        _write(ckpt / "state" / "0" / str(p) / "_metadata" / "schema", _schema())
    return ckpt


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _aside(ckpt: Path) -> list[str]:
    """What was moved aside, relative to the checkpoint (crc files too)."""
    (stamp,) = (ckpt / repair.ASIDE).iterdir()
    return sorted(str(p.relative_to(stamp)) for p in stamp.rglob("*") if p.is_file())


@pytest.fixture
def ckpt(tmp_path):
    return spark_checkpoint(tmp_path / "s" / "ckpt")


def test_an_intact_checkpoint_is_left_alone(ckpt):
    before = sorted(p for p in ckpt.rglob("*"))
    assert repair.repair_query(ckpt) == []
    assert sorted(p for p in ckpt.rglob("*")) == before and not (ckpt / repair.ASIDE).exists()


def test_a_torn_newest_offsets_goes_aside_with_its_commit_and_the_batch_runs_again(ckpt, caplog):
    _truncate(ckpt / "offsets" / "3")
    with caplog.at_level(logging.INFO, logger="streamops.checkpoint"):
        moved = repair.repair_query(ckpt)
    assert [m.path for m in moved] == ["offsets/3", "commits/3"]
    assert "Unterminated string" in moved[0].why or "Expecting" in moved[0].why, moved[0].why
    assert _aside(ckpt) == ["commits/.3.crc", "commits/3", "offsets/.3.crc", "offsets/3"]
    # the last intact batch is what remains; its source log entry stays: batch 3 takes the same files
    assert layout.last_planned_batch(ckpt) == layout.last_committed_batch(ckpt) == 2
    assert (ckpt / "sources" / "0" / "3").is_file() and layout.state_partitions(ckpt) == 2
    line = next(r.getMessage() for r in caplog.records if "action=checkpoint-repair" in r.getMessage())
    assert "offsets/3" in line and "commits/3" in line and str(ckpt) in line


def test_a_torn_newest_commit_goes_aside_and_its_planned_batch_runs_again(ckpt):
    _truncate(ckpt / "commits" / "3")
    (ckpt / "commits" / "3").write_text("v1\n{\"nextBatch")
    assert [m.path for m in repair.repair_query(ckpt)] == ["commits/3"]
    assert layout.last_planned_batch(ckpt) == 3 and layout.last_committed_batch(ckpt) == 2


def test_a_commit_without_its_offsets_goes_aside(ckpt):
    (ckpt / "offsets" / "3").unlink()
    (ckpt / "offsets" / ".3.crc").unlink()
    moved = repair.repair_query(ckpt)
    assert [m.path for m in moved] == ["commits/3"] and "offsets/3" in moved[0].why
    assert layout.last_committed_batch(ckpt) == 2


def test_a_torn_newest_source_log_entry_takes_its_batch_aside(ckpt):
    _truncate(ckpt / "sources" / "0" / "3")
    moved = [m.path for m in repair.repair_query(ckpt)]
    assert moved == ["sources/0/3", "offsets/3", "commits/3"]
    assert layout.last_planned_batch(ckpt) == layout.last_committed_batch(ckpt) == 2
    assert layout.SourceLog(ckpt).seen() == 3


def test_a_torn_newest_compaction_goes_aside_when_the_entries_before_it_are_there(ckpt):
    src = ckpt / "sources" / "0"
    (src / "3").rename(src / "3.compact")
    _truncate(src / "3.compact")
    assert [m.path for m in repair.repair_query(ckpt)] == ["sources/0/3.compact", "offsets/3", "commits/3"]


def test_a_torn_compaction_whose_earlier_entries_are_gone_is_refused(ckpt):
    src = ckpt / "sources" / "0"
    (src / "3").rename(src / "3.compact")
    (src / "1").unlink()  # cleaned up after the compaction, as Spark does
    _truncate(src / "3.compact")
    with pytest.raises(repair.CheckpointTorn, match=r"sources/0/3\.compact"):
        repair.repair_query(ckpt)


def test_torn_state_metadata_goes_aside_and_spark_writes_it_again(ckpt):
    _truncate(ckpt / "state" / "0" / "_metadata" / "metadata")
    _truncate(ckpt / "state" / "0" / "1" / "_metadata" / "schema")
    moved = [m.path for m in repair.repair_query(ckpt)]
    assert moved == ["state/0/1/_metadata/schema", "state/0/_metadata/metadata"]
    assert layout.last_committed_batch(ckpt) == 3, "the logs are intact: no batch runs again"


def test_a_torn_query_metadata_file_is_kept_and_replaced_by_a_new_id(ckpt):
    _truncate(ckpt / "metadata")
    assert [m.path for m in repair.repair_query(ckpt)] == ["metadata"]
    assert "metadata" in _aside(ckpt)
    assert json.loads((ckpt / "metadata").read_text())["id"]


def test_a_torn_entry_in_the_middle_is_refused_naming_the_file_and_the_fix(ckpt):
    _truncate(ckpt / "offsets" / "1")
    with pytest.raises(repair.CheckpointTorn) as e:
        repair.repair_query(ckpt)
    msg = str(e.value)
    assert str(ckpt / "offsets" / "1") in msg and "not the newest" in msg and "Fix:" in msg
    assert not (ckpt / repair.ASIDE).exists() and (ckpt / "offsets" / "1").exists(), "nothing moved"


def test_a_stage_s_both_queries_are_repaired(ckpt):
    quarantine = spark_checkpoint(layout.quarantine_checkpoint(ckpt), batches=2)
    _truncate(quarantine / "offsets" / "1")
    moved = repair.repair_stage(ckpt)
    assert [(m.query, m.path) for m in moved] == [("quarantine", "offsets/1"), ("quarantine", "commits/1")]
    assert "quarantine" in repair.describe(moved) and "offsets/1" in repair.describe(moved)


def test_reading_a_torn_file_names_it_instead_of_a_bare_json_error(ckpt):
    _truncate(ckpt / "offsets" / "3")
    _truncate(ckpt / "sources" / "0" / "2")
    with pytest.raises(layout.CheckpointUnreadable, match=str(ckpt / "offsets" / "3")) as e:
        layout.state_partitions(ckpt)
    assert "Fix:" in str(e.value)
    with pytest.raises(layout.CheckpointUnreadable, match=str(ckpt / "sources" / "0" / "2")):
        layout.batch_files(ckpt, 2)
    with pytest.raises(layout.CheckpointUnreadable, match=str(ckpt / "sources" / "0" / "2")):
        layout.SourceLog(ckpt).seen()
