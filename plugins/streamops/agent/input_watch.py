"""What a file source cannot see for itself: files still being written, and input it will never read.

Spark's file source lists the input directory, reads each new file once, at its size then, and
never again. A producer that writes a file in place (lines, a pause, more lines) therefore loses
whatever it writes after the read, without a word; and a sub-directory is never read at all.

- `Landing`: the producers' contract. Files are written into `<input>/_landing/` (Spark ignores
  names that start with `_`) and moved into the input directory, by an atomic rename, once they
  are complete: when `<name>.done` exists beside them, or (unless the stage asks for markers)
  when they have not been modified for `quiet_s`: their size and modification time unchanged over
  this driver's looks for `quiet_s` of its monotonic clock. Never its wall clock against the
  modification time: that is stamped by the producer's host or the file server, whose clock may
  be off by more than `quiet_s`, and a file still being written would be moved (docs/ha.md, "Clocks").
- `InputAudit`: the safety net for producers that write into the input directory directly. A
  file whose modification time moved after a batch read it, and a sub-directory, are reported
  (log, `input_anomalies`, `streamops status`): never silent.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("streamops.input")

LANDING = "_landing"
MARKER = ".done"


def _batch(entry_name: str) -> int:
    return int(entry_name.split(".")[0])


def _parse_entry(line: str) -> dict[str, Any]:
    entry: dict[str, Any] = json.loads(line)
    return entry


class Landing:
    """Moves complete files from `<input>/_landing/` into `<input>`."""

    def __init__(self, input_dir: Path, quiet_s: float = 2.0, markers_only: bool = False):
        self.input_dir = Path(input_dir)
        self.dir = self.input_dir / LANDING
        self.quiet_s, self.markers_only = quiet_s, markers_only
        # name → ((size, mtime_ns) as last seen, time.monotonic() of the first look that saw them so)
        self._unchanged: dict[str, tuple[tuple[int, int], float]] = {}

    def move_ready(self, now: float | None = None) -> list[str]:
        """One pass: the names moved into the input directory. `now`: time.monotonic()."""
        now = time.monotonic() if now is None else now
        try:
            entries = [e for e in os.scandir(self.dir) if e.is_file() and not e.name.startswith(".")]
        except FileNotFoundError:
            return []
        markers = {e.name[: -len(MARKER)] for e in entries if e.name.endswith(MARKER)}
        moved, unchanged = [], {}
        for e in entries:
            if e.name.endswith(MARKER):
                continue
            try:
                st = e.stat()
            except FileNotFoundError:  # another replica's driver moved it meanwhile
                continue
            seen = self._unchanged.get(e.name)
            since = seen[1] if seen is not None and seen[0] == (st.st_size, st.st_mtime_ns) else now
            unchanged[e.name] = ((st.st_size, st.st_mtime_ns), since)
            complete = e.name in markers or (not self.markers_only and now - since >= self.quiet_s)
            if not complete:
                continue
            target = self.input_dir / e.name
            if target.exists():  # a name the source has already read: renaming would replace it unread
                log.warning("action=landing %s is already in %s: left in %s (rename it to deliver it)", e.name,
                            self.input_dir, self.dir)
                continue
            try:
                os.rename(e.path, target)
            except FileNotFoundError:  # another replica's driver moved it first
                continue
            if e.name in markers:
                Path(e.path + MARKER).unlink(missing_ok=True)
            moved.append(e.name)
        self._unchanged = {n: v for n, v in unchanged.items() if n not in moved}  # bounded: what is there now
        if moved:
            log.info("action=landing moved %d file(s) into the source: %s", len(moved), ", ".join(moved[:5]))
        return moved


@dataclass(frozen=True)
class Anomaly:
    path: str
    kind: str  # changed_after_read | subdirectory
    detail: str
    bytes_now: int | None = None


class InputAudit:
    """Compares what the checkpoint's source log says each batch read (path and modification time,
    `sources/0/N[.compact]`) with the files now, and lists sub-directories. Each anomaly is
    returned once (again only when a changed file changes further). Only the files of the last
    `keep_batches` batches are watched: a producer writes in place within minutes, and a stage
    that has read a million files must not stat them all every pass."""

    def __init__(self, input_dir: Path, checkpoint: Path, keep_batches: int = 500):
        self.input_dir = Path(input_dir)
        self.log_dir = Path(checkpoint) / "sources" / "0"
        self.keep_batches = keep_batches
        self._parsed: set[str] = set()
        self._newest = -1
        self._read: dict[str, tuple[int, int]] = {}  # path → (batch, modification time in ms when it was listed)
        self._reported: dict[tuple[str, str], int | None] = {}

    def _new_entries(self) -> None:
        try:
            listed = [n for n in os.listdir(self.log_dir) if n.split(".")[0].isdigit()]
        except FileNotFoundError:
            return
        # The latest compaction lists every batch before it: older entries are never needed again.
        base = max((_batch(n) for n in listed if n.endswith(".compact")), default=-1)
        self._parsed = {n for n in self._parsed if _batch(n) >= base}
        for name in sorted((n for n in listed if _batch(n) >= base and n not in self._parsed), key=_batch):
            try:
                lines = (self.log_dir / name).read_text().splitlines()[1:]  # line 0 is "v1"
            except FileNotFoundError:  # compacted away meanwhile: its entries are in the .compact
                continue
            self._take(lines, name.endswith(".compact"))
            self._parsed.add(name)
        self._read = {p: v for p, v in self._read.items() if v[0] >= self._newest - self.keep_batches}

    def _take(self, lines: list[str], compaction: bool) -> None:
        """A compaction repeats every batch so far, oldest first (quadratic over a long run if parsed
        whole each time): read from its end, back to the batches seen or no longer watched."""
        seen_upto = self._newest
        for line in reversed(lines) if compaction else lines:
            if not line.strip():
                continue
            entry = _parse_entry(line)
            batch = int(entry.get("batchId", 0))
            if compaction and (batch <= seen_upto or batch < self._newest - self.keep_batches):
                break
            if batch >= self._newest - self.keep_batches:
                path = entry["path"].removeprefix("file://").removeprefix("file:")
                self._read.setdefault(path, (batch, int(entry["timestamp"])))
                self._newest = max(self._newest, batch)

    def check(self) -> list[Anomaly]:
        self._new_entries()
        found = []
        for path, (_, read_ms) in self._read.items():
            try:
                st = os.stat(path)
            except FileNotFoundError:  # deleted after it was read: what was read is counted
                continue
            if st.st_mtime_ns // 1_000_000 > read_ms:
                found.append(Anomaly(path, "changed_after_read",
                                     f"modified after a batch read it (read at the version of "
                                     f"{time.strftime('%H:%M:%S', time.gmtime(read_ms / 1000))} UTC, modified again at "
                                     f"{time.strftime('%H:%M:%S', time.gmtime(st.st_mtime))} UTC, {st.st_size} bytes "
                                     f"now): the file source never reads a file twice, so what was written after the "
                                     f"read is not counted; producers write into {LANDING}/ instead", st.st_size))
        try:
            subdirs = [e.path for e in os.scandir(self.input_dir) if e.is_dir() and not e.name.startswith((".", "_"))]
        except FileNotFoundError:
            subdirs = []
        for path in subdirs:
            found.append(Anomaly(path, "subdirectory", "a sub-directory of the input directory: the file source "
                                                       "does not read sub-directories, so its files are not counted"))
        new = [a for a in found if self._reported.get((a.path, a.kind), -1) != a.bytes_now]
        for a in new:
            self._reported[(a.path, a.kind)] = a.bytes_now
        return new
