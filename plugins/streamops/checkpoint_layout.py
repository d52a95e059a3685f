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
    lines = (Path(ckpt) / "offsets" / str(n)).read_text().splitlines()
    conf = json.loads(lines[1]).get("conf", {}) if len(lines) > 1 else {}
    value = conf.get("spark.sql.shuffle.partitions")
    return int(value) if value is not None else None


def batch_files(ckpt: Path, batch_id: int) -> list[str]:
    """The input files the file source planned for `batch_id` (its log `sources/0/N`, or the
    compacted `sources/0/M.compact` that holds it), as plain paths."""
    log_dir = Path(ckpt) / "sources" / "0"
    candidates = [log_dir / str(batch_id)] + sorted(log_dir.glob("*.compact"), key=lambda p: int(p.name.split(".")[0]))
    for path in candidates:
        if not path.is_file() or (path.name.endswith(".compact") and int(path.name.split(".")[0]) < batch_id):
            continue
        entries = [json.loads(line) for line in path.read_text().splitlines()[1:] if line.strip()]
        files = [e["path"] for e in entries if e.get("batchId", batch_id) == batch_id]
        if files:
            return [re.sub(r"^file:(//)?", "", f) for f in files]
    return []


def quarantine_checkpoint(ckpt: Path) -> Path:
    """The stage's side query (malformed records) keeps its own checkpoint beside the main one."""
    ckpt = Path(ckpt)
    return ckpt.with_name(ckpt.name + ".quarantine")


# A stage runs two queries on one source: `main` (the workload) and `quarantine` (bad lines).
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
    files: int
    rows: int | None


class SourceLog:
    """The file source's log in a checkpoint (`sources/0/N[.compact]`: a "v1" line, then one JSON
    line per file): how many files the query has taken, in all and per batch. Log entries never
    change once written, so each is read once."""

    def __init__(self, ckpt: Path):
        self.log_dir = Path(ckpt) / "sources" / "0"
        self._lines: dict[str, int] = {}

    def seen(self) -> int:
        """Files taken by every batch so far: the latest compaction and the entries after it."""
        try:
            names = [n for n in os.listdir(self.log_dir) if not n.startswith(".") and n.split(".")[0].isdigit()]
        except FileNotFoundError:
            return 0
        by_batch = {int(n.split(".")[0]): n for n in names}
        compacts = [b for b, n in by_batch.items() if n.endswith(".compact")]
        base = max(compacts) if compacts else -1
        total = 0
        for b, n in by_batch.items():
            if b >= base:
                if n not in self._lines:
                    lines = (self.log_dir / n).read_text().splitlines()
                    self._lines[n] = sum(1 for line in lines[1:] if line.strip())  # line 0 is "v1"
                total += self._lines[n]
        return total

    def _count(self, name: str) -> int | None:
        """Files listed in the log entry `name` (read once), None if it is not there."""
        if name not in self._lines:
            try:
                lines = (self.log_dir / name).read_text().splitlines()
            except FileNotFoundError:
                return None
            self._lines[name] = sum(1 for line in lines[1:] if line.strip())
        return self._lines[name]

    def _upto(self, batch_id: int, depth: int = 0) -> int | None:
        """Files logged by batches 0 … batch_id (a compaction lists them all)."""
        if batch_id < 0:
            return 0
        whole = self._count(f"{batch_id}.compact")
        if whole is not None:
            return whole
        own = self._count(str(batch_id))
        rest = None if own is None or depth > 100 else self._upto(batch_id - 1, depth + 1)
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
    source reports no backlog, so count the visible files and subtract those in the source log."""

    def __init__(self, input_dir: Path, checkpoint: Path):
        self.input_dir = Path(input_dir)
        self.log = SourceLog(checkpoint)

    def seen(self) -> int:
        return self.log.seen()

    def files_of(self, batch_id: int) -> int | None:
        return self.log.files_of(batch_id)

    def _visible(self) -> int:
        try:  # `_landing/` and hidden files are not the source's yet
            return sum(1 for e in os.scandir(self.input_dir) if e.is_file() and not e.name.startswith((".", "_")))
        except FileNotFoundError:
            return 0

    def measure(self, rows_per_file: float | None = None) -> Backlog:
        files = max(0, self._visible() - self.seen())
        return Backlog(files=files, rows=round(files * rows_per_file) if rows_per_file else None)
