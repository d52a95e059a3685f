"""The on-disk layout of a generated run, and its ground truth.

One file per tick, published atomically (staged under `_staging/`, fsynced, then
`os.replace`d to `part-{run}-{tick:08d}.json`), plus a ground-truth manifest line per
file in `_manifest/{run}.jsonl`. Spark's file source ignores names starting with "_"
or ".", so neither the staging area nor the manifest is ever read as input.

Here: those names, the durable write primitives (fsynced files and manifest appends, and
the repair of a manifest line a crash cut short) and the manifest readers that tests and
SLA checks use as ground truth. The writer loop that produces the files is in `writer`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MANIFEST_DIR = "_manifest"
STAGING_DIR = "_staging"


def data_file_name(run: str, tick: int) -> str:
    return f"part-{run}-{tick:08d}.json"


# ---------------------------------------------------------------------------
# Durable file primitives
# ---------------------------------------------------------------------------


def fsync_dir(path: Path) -> None:
    # Makes the rename itself durable; not all platforms allow opening a directory.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_synced(path: Path, payload: bytes) -> None:
    with open(path, "wb") as f:
        f.write(payload)
        f.flush()
        os.fsync(f.fileno())


def append_line(path: Path, obj: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(obj, separators=(",", ":")) + "\n")
        f.flush()
        os.fsync(f.fileno())


def repair_manifest(path: Path) -> None:
    """Drop a half-written last line left by a crash during append."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)
            f.flush()
            os.fsync(f.fileno())


# ---------------------------------------------------------------------------
# Manifest readers (ground truth for tests and SLA checks)
# ---------------------------------------------------------------------------


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue  # only a crash-truncated tail can be malformed
    return entries


def read_manifest(out_dir: Path | str, run: str | None = None) -> list[dict[str, Any]]:
    """Manifest entries of every run in `out_dir` (or just `run`), in publish order per run."""
    mdir = Path(out_dir) / MANIFEST_DIR
    if not mdir.is_dir():
        return []
    paths = [mdir / f"{run}.jsonl"] if run else sorted(mdir.glob("*.jsonl"))
    return [e for p in paths if p.exists() for e in read_jsonl(p)]


def read_valid_records(out_dir: Path | str, run: str | None = None) -> Iterator[dict[str, Any]]:
    """Re-read the published files and yield the valid records (not listed as garbage), in order."""
    out_dir = Path(out_dir)
    for entry in read_manifest(out_dir, run):
        garbage = set(entry["garbage_ids"])
        with open(out_dir / entry["file"], encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and rec.get("id") not in garbage:
                    yield rec
