"""Reading and copying Structured Streaming checkpoints (no Spark needed).

Layout: offsets/N (planned batches), commits/N (completed batches), metadata, sources/,
state/<operator>/<partition>/ (RocksDB files). Batch N is committed when commits/N exists.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

# Log files: "N", "N.compact" and their checksums ".N.crc", ".N.compact.crc".
_LOG_FILE = re.compile(r"^\.?(\d+)(?:\.compact)?(?:\.crc)?$")
# State snapshots and changelogs: "V.zip", "V.changelog", ".V.zip.crc", ...
_STATE_FILE = re.compile(r"^\.?(\d+)\.(?:zip|changelog)(?:\.crc)?$")


class CopyRaced(RuntimeError):
    """A file the copy needed vanished while copying (log cleanup); the copy is retried."""


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


def copy_stopped(src: Path, dst: Path) -> Path:
    """Copy the checkpoint of a *stopped* query (rollback copies). Atomic: written beside the
    destination and renamed into place, so a copy that exists is complete even if the copying
    process was killed half-way (a later --resume trusts it)."""
    dst = Path(dst)
    tmp = dst.with_name(f".{dst.name}.partial")
    for leftover in (tmp, dst):
        if leftover.exists():
            shutil.rmtree(leftover)
    shutil.copytree(src, tmp)
    tmp.rename(dst)
    return dst


def restore(copy: Path, ckpt: Path) -> None:
    """Put a copy back in place of the checkpoint; the copy is kept until the caller removes it."""
    ckpt = Path(ckpt)
    if ckpt.exists():
        shutil.rmtree(ckpt)
    shutil.copytree(copy, ckpt)


def _is_temp(name: str) -> bool:
    return name.endswith(".tmp") or ".tmp." in name


def _copy_file(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copy2(src, dst)
    except FileNotFoundError as e:
        raise CopyRaced(str(e)) from e


def _copy_logs(src: Path, dst: Path, last: int) -> None:
    """offsets/, commits/ and sources/*/: entries of batches <= last only."""
    for log_dir in [src / "offsets", src / "commits", *sorted((src / "sources").glob("*"))]:
        if not log_dir.is_dir():
            continue
        for f in log_dir.iterdir():
            m = _LOG_FILE.match(f.name)
            if m and int(m.group(1)) <= last:
                _copy_file(f, dst / f.relative_to(src))


def _copy_state(src: Path, dst: Path, version: int) -> None:
    """state/<op>/<partition>/: snapshots up to `version`, every SST (immutable, named by uuid)
    and the metadata; never a temp file of a batch in flight."""
    state = src / "state"
    if not state.is_dir():
        return
    for f in state.rglob("*"):
        if not f.is_file() or _is_temp(f.name):
            continue
        m = _STATE_FILE.match(f.name)
        if m and int(m.group(1)) > version:
            continue
        _copy_file(f, dst / f.relative_to(src))


def copy_live(src: Path, dst: Path, attempts: int = 3) -> int:
    """Copy the checkpoint of a *running* query, consistent as of its last committed batch N:
    offsets and commits up to N, the source logs up to N, metadata, and state only up to the
    version batch N committed (N + 1). A batch in flight while copying (offsets/N+1, state
    version N+2, temp files) does not leak into the copy. Returns N."""
    src, dst = Path(src), Path(dst)
    for attempt in range(attempts):
        last = last_committed_batch(src)
        if last is None:
            raise ValueError(f"{src}: no committed batch yet; nothing consistent to copy")
        if dst.exists():
            shutil.rmtree(dst)
        try:
            dst.mkdir(parents=True)
            _copy_file(src / "metadata", dst / "metadata")
            _copy_logs(src, dst, last)
            _copy_state(src, dst, last + 1)
            return last
        except CopyRaced:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")
