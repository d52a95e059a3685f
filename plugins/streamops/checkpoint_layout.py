"""The layout of a Structured Streaming checkpoint, read without Spark: the one module the
driver (spark_apps/, agent/) and the control plane (execute/) share about checkpoints.

offsets/N (planned batches), commits/N (completed batches), metadata, sources/0/N (the file
source's log: which input files batch N took), state/<operator>/<partition>/ (RocksDB files).
Batch N is committed when commits/N exists. The source log against the input directory is the
stage's backlog (`FileSourceBacklog`: the agent's metrics, the control plane's catch-up checks).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote


class CheckpointUnreadable(ValueError):
    """A checkpoint file that is not what Spark writes (torn by a crash, truncated, not UTF-8): the
    message names the file and the fix, never a bare JSONDecodeError."""

    def __init__(self, path: Path, why: str):
        self.path, self.why = Path(path), why
        super().__init__(f"{path}: unreadable checkpoint file ({why}). Fix: `streamops start` moves a torn newest "
                         f"log entry aside by itself; otherwise restore the checkpoint from a rollback copy")


def read_entry(path: Path) -> list[str]:
    """The lines of a log entry (`offsets/N`, `commits/N`, `sources/0/N`, ...) after its version
    line ("v1"), unparsed. FileNotFoundError is the caller's to handle."""
    data = Path(path).read_bytes()
    if data[:1] == b"\0":  # Kafka's initial offsets (sources/0/0) start with a zero byte (SPARK-19517)
        data = data[1:]
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError as e:
        raise CheckpointUnreadable(path, f"not UTF-8: {e.reason}") from e
    if not re.fullmatch(r"v\d+", lines[0]):
        raise CheckpointUnreadable(path, f"no version line, found {lines[0][:40]!r}")
    return [line for line in lines[1:] if line.strip()]


def parse(path: Path, line: str) -> dict[str, Any]:
    """One JSON line of `path`'s entry; a torn one is named."""
    try:
        entry: dict[str, Any] = json.loads(line)
        return entry
    except json.JSONDecodeError as e:
        raise CheckpointUnreadable(path, f"{e.msg} (char {e.pos} of a line)") from e


def _batch_ids(d: Path) -> list[int]:
    try:
        return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit())
    except FileNotFoundError:
        return []


def last_committed_batch(ckpt: Path) -> int | None:
    ids = _batch_ids(Path(ckpt) / "commits")
    return ids[-1] if ids else None


def last_planned_batch(ckpt: Path) -> int | None:
    ids = _batch_ids(Path(ckpt) / "offsets")
    return ids[-1] if ids else None


def state_partitions(ckpt: Path) -> int | None:
    """The shuffle (= state) partitions fixed in the checkpoint: the conf recorded with the latest
    planned batch. None for a checkpoint that has not planned a batch yet."""
    n = last_planned_batch(ckpt)
    if n is None:
        return None
    path = Path(ckpt) / "offsets" / str(n)
    lines = read_entry(path)
    conf = parse(path, lines[0]).get("conf", {}) if lines else {}
    value = conf.get("spark.sql.shuffle.partitions")
    return int(value) if value is not None else None


def source_change(ckpt: Path, kind: str, topic: str | None = None) -> str | None:
    """Why a checkpoint cannot serve a stage's source as declared now, or None when it can: its
    newest planned offsets belong to another kind of source, or to another Kafka topic. Spark
    does not refuse that: a changed topic on an old checkpoint read nothing, silently."""
    n = last_planned_batch(ckpt)
    if n is None:
        return None
    path = Path(ckpt) / "offsets" / str(n)
    lines = read_entry(path)
    if len(lines) < 2 or lines[1] == "-":
        return None
    offset = parse(path, lines[1])
    held = "files" if "logOffset" in offset else "kafka"
    if held != kind:
        return f"the checkpoint {ckpt} holds the offsets of a {held} source, and the stage now reads {kind}"
    topics = sorted(offset) if held == "kafka" else []
    if held == "kafka" and topic not in topics:
        return (f"the checkpoint {ckpt} holds the offsets of topic(s) {', '.join(topics)}, and the stage now reads "
                f"topic {topic}: Spark would read nothing from it")
    return None


def batch_files(ckpt: Path, batch_id: int) -> list[str]:
    """The input files the file source planned for `batch_id` (its log `sources/0/N`, or the
    compacted `sources/0/M.compact` that holds it), as plain paths."""
    log_dir = Path(ckpt) / "sources" / "0"
    candidates = [log_dir / str(batch_id)] + sorted(log_dir.glob("*.compact"), key=lambda p: int(p.name.split(".")[0]))
    for path in candidates:
        if not path.is_file() or (path.name.endswith(".compact") and int(path.name.split(".")[0]) < batch_id):
            continue
        entries = [parse(path, line) for line in read_entry(path)]
        # A Kafka source's entry holds its first offsets, not files.
        files = [e["path"] for e in entries if "path" in e and e.get("batchId", batch_id) == batch_id]
        if files:
            return [re.sub(r"^file:(//)?", "", f) for f in files]
    return []


def quarantine_checkpoint(ckpt: Path) -> Path:
    """The stage's side query (malformed records) keeps its own checkpoint beside the main one."""
    ckpt = Path(ckpt)
    return ckpt.with_name(ckpt.name + ".quarantine")


# A stage runs two queries on one source: `main` (the job) and `quarantine` (bad lines).
QUERIES = ("main", "quarantine")

# The state store every stage writes: offline state repartition needs RocksDB state.
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def query_checkpoint(which: str, ckpt: Path) -> Path:
    return Path(ckpt) if which == "main" else quarantine_checkpoint(ckpt)


def has_state(ckpt: Path) -> bool:
    return (Path(ckpt) / "state").is_dir()


# -- the file source's log: what the query has taken -----------------------------------------------
@dataclass(frozen=True)
class Backlog:
    files: int | None  # None: a source without files (Kafka)
    rows: int | None


def file_name(uri: str) -> str:
    """The name of a file in the source log: its path is a URI (`file:///in/a%20b.json`)."""
    return unquote(uri.rsplit("/", 1)[-1])


class SourceLog:
    """The file source's log in a checkpoint (`sources/0/N[.compact]`: a "v1" line, then one JSON
    line per file): which files the query has taken, how many in all and per batch. Log entries
    never change once written, so each is read once; the names of the files read are kept (about
    100 bytes a file: what the log itself holds)."""

    def __init__(self, ckpt: Path):
        self.log_dir = Path(ckpt) / "sources" / "0"
        self._lines: dict[str, int] = {}  # entry → files it lists; every one's names are in _names
        self._names: set[str] = set()

    def _current(self) -> list[str]:
        """The entries that hold every file taken so far: the latest compaction and those after it."""
        try:
            names = [n for n in os.listdir(self.log_dir) if not n.startswith(".") and n.split(".")[0].isdigit()]
        except FileNotFoundError:
            return []
        by_batch = {int(n.split(".")[0]): n for n in names}
        base = max((b for b, n in by_batch.items() if n.endswith(".compact")), default=-1)
        return [by_batch[b] for b in sorted(by_batch) if b >= base]

    def _forget_before(self, current: list[str]) -> None:
        """Drop the counts of entries older than the latest compaction, once it was read: it holds
        them all, and the next compaction's tail is found from it (a run lives for months)."""
        if current and current[0].endswith(".compact"):
            base = int(current[0].split(".")[0])
            self._lines = {n: c for n, c in self._lines.items() if int(n.split(".")[0]) >= base}

    def seen(self) -> int:
        """Files taken by every batch so far."""
        current = self._current()
        n = sum(self._count(n) or 0 for n in current)
        self._forget_before(current)
        return n

    def names(self) -> set[str]:
        """The names of the files taken by every batch so far."""
        current = self._current()
        for n in current:
            self._count(n)
        self._forget_before(current)
        return self._names

    def _count(self, name: str) -> int | None:
        """Files listed in the log entry `name` (read once, their names kept), None if it is not there."""
        if name not in self._lines:
            try:
                lines = read_entry(self.log_dir / name)
            except FileNotFoundError:
                return None
            self._names.update(file_name(e["path"]) for e in self._new_entries(name, lines))
            self._lines[name] = len(lines)
        return self._lines[name]

    def _new_entries(self, name: str, lines: list[str]) -> list[dict[str, Any]]:
        """The entries of `lines` whose names may not be kept yet. A compaction N repeats every
        batch before it, then adds N's own: when those batches were read already, only its tail
        is parsed (a long run's compaction lists millions of files, every 10 batches)."""
        batch = int(name.split(".")[0])
        before = self._read_upto(batch - 1) if name.endswith(".compact") else None
        if before is not None and before <= len(lines):
            tail = [parse(self.log_dir / name, line) for line in lines[before:]]
            if all(e.get("batchId", batch) == batch for e in tail):
                return tail
        return [parse(self.log_dir / name, line) for line in lines]

    def _read_upto(self, batch_id: int) -> int | None:
        """Files of batches 0 … batch_id, if the entries that list them were read already (no file
        is read here); else None."""
        total = 0
        for b in range(batch_id, -1, -1):
            if f"{b}.compact" in self._lines:
                return total + self._lines[f"{b}.compact"]
            if str(b) not in self._lines:
                return None
            total += self._lines[str(b)]
        return total

    def _upto(self, batch_id: int, depth: int = 0) -> int | None:
        """Files logged by batches 0 … batch_id (a compaction lists them all)."""
        if batch_id < 0:
            return 0
        whole = self._count(f"{batch_id}.compact")
        if whole is not None:
            return whole
        own = self._count(str(batch_id))
        if own is None or depth > 100:
            return None
        rest = self._upto(batch_id - 1, depth + 1)
        return None if rest is None else own + rest

    def files_of(self, batch_id: int) -> int | None:
        """The files batch `batch_id` took: its own log entry, or for a compaction (which lists every
        file up to it) what it adds to the batches before; None when the entries are gone."""
        own = self._count(str(batch_id))
        if own is not None:
            return own
        whole, before = self._count(f"{batch_id}.compact"), self._upto(batch_id - 1)
        return None if whole is None or before is None else max(0, whole - before)


class FileSourceBacklog:
    """Files in the input directory that the query has not yet taken into a batch: Spark's file
    source reports no backlog, so count the visible files whose names the source log lacks. By
    name, not by count: a file read and then deleted (input retention) is in the log but no
    longer visible, and subtracting it would hide as many unread ones. Names, not paths: the
    source reads no sub-directory, and the log holds the directory as Spark qualified it."""

    def __init__(self, input_dir: Path, checkpoint: Path):
        self.input_dir = Path(input_dir)
        self.log = SourceLog(checkpoint)

    def seen(self) -> int:
        return self.log.seen()

    def files_of(self, batch_id: int) -> int | None:
        return self.log.files_of(batch_id)

    def _visible(self) -> list[str]:
        try:  # `_landing/` and hidden files are not the source's yet
            return [e.name for e in os.scandir(self.input_dir) if e.is_file() and not e.name.startswith((".", "_"))]
        except FileNotFoundError:
            return []

    def measure(self, rows_per_file: float | None = None) -> Backlog:
        taken = self.log.names()  # the log first: a file that lands meanwhile is counted, never missed
        files = sum(1 for n in self._visible() if n not in taken)
        return Backlog(files=files, rows=round(files * rows_per_file) if rows_per_file else None)
