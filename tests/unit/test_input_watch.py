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
    """Quiet: its size and modification time unchanged over the driver's looks for `quiet_s` of
    its monotonic clock (`now`); a file written to between the looks waits."""
    _write(tmp_path / LANDING / "done.json", b'{"a": 1}\n', age_s=5)
    writing = _write(tmp_path / LANDING / "writing.json", b'{"a": 1}\n{"a"')
    landing = Landing(tmp_path, quiet_s=2)
    assert landing.move_ready(now=100.0) == [], "first seen now: quiet since this look"
    with open(writing, "ab") as f:
        f.write(b': 2}\n')
    moved = landing.move_ready(now=102.0)
    assert moved == ["done.json"] and (tmp_path / "done.json").exists()
    assert (tmp_path / LANDING / "writing.json").exists() and not (tmp_path / "writing.json").exists()
    assert landing.move_ready(now=103.9) == [] and landing.move_ready(now=104.0) == ["writing.json"]


def _skewed_wall_clock(monkeypatch, skew_s: float) -> None:
    """This driver's wall clock `skew_s` off the clock that stamps the files' modification times
    (the producer's host, an NFS server): its time.time() only, its monotonic clock runs on."""
    from types import SimpleNamespace

    from streamops.agent import input_watch

    monkeypatch.setattr(input_watch, "time", SimpleNamespace(
        time=lambda: time.time() + skew_s, monotonic=time.monotonic, strftime=time.strftime, gmtime=time.gmtime))


def test_a_file_being_written_is_not_moved_by_a_driver_whose_wall_clock_runs_ahead(tmp_path, monkeypatch):
    """Issue 44 item 14: the driver's clock 120 s ahead of the file's stamper made a file written
    a moment ago look quiet for 120 s: moved half-written, the rest of it never read."""
    _skewed_wall_clock(monkeypatch, +120)
    writing = _write(tmp_path / LANDING / "writing.json", b'{"a": 1}\n{"a"')
    landing = Landing(tmp_path, quiet_s=2)
    assert landing.move_ready() == [], "moved half-written"
    with open(writing, "ab") as f:
        f.write(b': 2}\n')
    assert landing.move_ready() == []
    assert (tmp_path / LANDING / "writing.json").exists() and not (tmp_path / "writing.json").exists()


def test_a_quiet_file_is_moved_by_a_driver_whose_wall_clock_runs_behind(tmp_path, monkeypatch):
    """The driver's clock 120 s behind: a finished file looked 2 minutes younger than it is and
    waited those 2 minutes; now it moves once quiet for `quiet_s` of the driver's own time."""
    _skewed_wall_clock(monkeypatch, -120)
    _write(tmp_path / LANDING / "done.json", b'{"a": 1}\n', age_s=5)
    landing = Landing(tmp_path, quiet_s=0.2)
    landing.move_ready()
    time.sleep(0.3)
    assert landing.move_ready() == ["done.json"]


def test_with_markers_only_a_marked_file_moves_and_its_marker_goes(tmp_path):
    _write(tmp_path / LANDING / "old.json", b"x\n", age_s=60)
    _write(tmp_path / LANDING / "marked.json", b"x\n")
    _write(tmp_path / LANDING / "marked.json.done", b"")
    assert Landing(tmp_path, markers_only=True).move_ready() == ["marked.json"]
    assert not (tmp_path / LANDING / "marked.json.done").exists() and (tmp_path / LANDING / "old.json").exists()


def test_a_name_the_source_already_has_is_never_replaced(tmp_path):
    _write(tmp_path / "f.json", b"read already\n")
    _write(tmp_path / LANDING / "f.json", b"a resend\n", age_s=5)
    landing = Landing(tmp_path)
    assert landing.move_ready(now=0.0) == [] and landing.move_ready(now=10.0) == []
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
