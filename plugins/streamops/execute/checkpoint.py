"""Reading and copying Structured Streaming checkpoints (no Spark needed).

Layout: offsets/N (planned batches), commits/N (completed batches), metadata, sources/,
state/<operator>/<partition>/ (RocksDB files). Batch N is committed when commits/N exists.
"""

from __future__ import annotations

import json
import shutil
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


def has_state(ckpt: Path) -> bool:
    return (Path(ckpt) / "state").is_dir()


def copy_stopped(src: Path, dst: Path) -> Path:
    """Copy the checkpoint of a *stopped* query (rollback copies, migrations)."""
    dst = Path(dst)
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    return dst


def restore(copy: Path, ckpt: Path) -> None:
    """Put a copy back in place of the checkpoint; the copy is kept until the caller removes it."""
    ckpt = Path(ckpt)
    if ckpt.exists():
        shutil.rmtree(ckpt)
    shutil.copytree(copy, ckpt)
