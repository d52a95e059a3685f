"""A checkpoint that holds another source's offsets is refused before a start: Spark itself reads
nothing, silently, from a Kafka topic that is not the one its checkpoint's offsets name. Pure: the
offsets entries are written as Spark writes them (a version line, the batch's metadata, one
offset line per source)."""

from __future__ import annotations

import json

from streamops.checkpoint_layout import source_change

META = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {"spark.sql.shuffle.partitions": "4"}})


def _offsets(ckpt, n: int, source: dict | str) -> None:
    (ckpt / "offsets").mkdir(parents=True, exist_ok=True)
    line = source if isinstance(source, str) else json.dumps(source)
    (ckpt / "offsets" / str(n)).write_text(f"v1\n{META}\n{line}")


def test_a_new_checkpoint_and_the_same_source_are_fine(tmp_path):
    assert source_change(tmp_path, "kafka", "clicks") is None
    _offsets(tmp_path, 0, {"clicks": {"0": 20, "1": 20}})
    assert source_change(tmp_path, "kafka", "clicks") is None
    _offsets(tmp_path / "f", 3, {"logOffset": 3})
    assert source_change(tmp_path / "f", "files") is None


def test_another_topic_or_kind_of_source_is_named(tmp_path):
    _offsets(tmp_path, 0, {"clicks": {"0": 20}})
    _offsets(tmp_path, 1, {"clicks": {"0": 40}})
    why = source_change(tmp_path, "kafka", "clicks-v2")
    assert why is not None and "topic(s) clicks," in why and "topic clicks-v2" in why
    assert "a kafka source, and the stage now reads files" in source_change(tmp_path, "files")


def test_a_source_without_an_offset_yet_is_not_judged(tmp_path):
    _offsets(tmp_path, 0, "-")
    assert source_change(tmp_path, "kafka", "anything") is None
