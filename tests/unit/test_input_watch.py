"""The landing directory and the input audit (agent/input_watch.py): pure, on temporary files."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from streamops.agent.input_watch import LANDING, InputAudit, Landing


def _write(path: Path, data: bytes, age_s: float = 0.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if age_s:
        t = time.time() - age_s
        os.utime(path, (t, t))
    return path


def test_a_quiet_file_moves_into_the_source_and_a_fresh_one_waits(tmp_path):
    _write(tmp_path / LANDING / "done.json", b'{"a": 1}\n', age_s=5)
    _write(tmp_path / LANDING / "writing.json", b'{"a": 1}\n{"a"')
    moved = Landing(tmp_path, quiet_s=2).move_ready()
    assert moved == ["done.json"] and (tmp_path / "done.json").exists()
    assert (tmp_path / LANDING / "writing.json").exists() and not (tmp_path / "writing.json").exists()


def test_with_markers_only_a_marked_file_moves_and_its_marker_goes(tmp_path):
    _write(tmp_path / LANDING / "old.json", b"x\n", age_s=60)
    _write(tmp_path / LANDING / "marked.json", b"x\n")
    _write(tmp_path / LANDING / "marked.json.done", b"")
    assert Landing(tmp_path, markers_only=True).move_ready() == ["marked.json"]
    assert not (tmp_path / LANDING / "marked.json.done").exists() and (tmp_path / LANDING / "old.json").exists()


def test_a_name_the_source_already_has_is_never_replaced(tmp_path):
    _write(tmp_path / "f.json", b"read already\n")
    _write(tmp_path / LANDING / "f.json", b"a resend\n", age_s=5)
    assert Landing(tmp_path).move_ready() == []
    assert (tmp_path / "f.json").read_bytes() == b"read already\n"


def _log(ckpt: Path, batch: int, files: list[Path]) -> None:
    d = ckpt / "sources" / "0"
    d.mkdir(parents=True, exist_ok=True)
    entries = [json.dumps({"path": f"file://{f}", "timestamp": f.stat().st_mtime_ns // 1_000_000, "batchId": batch})
               for f in files]
    (d / str(batch)).write_text("\n".join(["v1", *entries]) + "\n")


def test_a_file_changed_after_it_was_read_and_a_subdirectory_are_reported_once(tmp_path):
    inputs, ckpt = tmp_path / "in", tmp_path / "ckpt"
    kept = _write(inputs / "kept.json", b"1\n", age_s=30)
    grown = _write(inputs / "grown.json", b"1\n2\n3\n", age_s=30)
    _log(ckpt, 0, [kept, grown])
    audit = InputAudit(inputs, ckpt)
    assert audit.check() == []
    with open(grown, "ab") as f:  # the producer goes on writing in place
        f.write(b"4\n5\n6\n")
    (inputs / "nested").mkdir()
    (inputs / LANDING).mkdir()  # the landing directory is not input
    found = {(Path(a.path).name, a.kind): a for a in audit.check()}
    assert set(found) == {("grown.json", "changed_after_read"), ("nested", "subdirectory")}
    assert found[("grown.json", "changed_after_read")].bytes_now == 12
    assert audit.check() == []  # once each
    with open(grown, "ab") as f:
        f.write(b"7\n")
    assert [(Path(a.path).name, a.bytes_now) for a in audit.check()] == [("grown.json", 14)]  # and again when it grows


def test_the_audit_watches_only_the_latest_batches_files(tmp_path):
    inputs, ckpt = tmp_path / "in", tmp_path / "ckpt"
    old = _write(inputs / "old.json", b"1\n", age_s=60)
    new = _write(inputs / "new.json", b"1\n", age_s=60)
    _log(ckpt, 0, [old])
    _log(ckpt, 5, [new])
    audit = InputAudit(inputs, ckpt, keep_batches=3)
    assert audit.check() == []
    for f in (old, new):
        with open(f, "ab") as out:
            out.write(b"2\n")
    assert [Path(a.path).name for a in audit.check()] == ["new.json"], "batch 0 is behind the last 3"
