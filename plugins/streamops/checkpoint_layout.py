"""The layout of a Structured Streaming checkpoint, read without Spark: the one module the
driver (spark_apps/, agent/) and the control plane (execute/) share about checkpoints.

offsets/N (planned batches), commits/N (completed batches), metadata, sources/0/N (the file
source's log: which input files batch N took), state/<operator>/<partition>/ (RocksDB files).
Batch N is committed when commits/N exists.
"""

from __future__ import annotations

import json
import re
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


def query_checkpoint(which: str, ckpt: Path) -> Path:
    return Path(ckpt) if which == "main" else quarantine_checkpoint(ckpt)


def has_state(ckpt: Path) -> bool:
    return (Path(ckpt) / "state").is_dir()
