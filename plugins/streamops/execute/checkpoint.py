"""Copying and restoring Structured Streaming checkpoints (no Spark needed); reading their
layout is `streamops.checkpoint_layout`, re-exported here for the control plane.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

from streamops.checkpoint_layout import (  # noqa: F401 - re-exported
    QUERIES,
    batch_files,
    has_state,
    last_committed_batch,
    last_planned_batch,
    quarantine_checkpoint,
    query_checkpoint,
    source_change,
    state_partitions,
)

# Log files: "N", "N.compact" and their checksums ".N.crc", ".N.compact.crc".
_LOG_FILE = re.compile(r"^\.?(\d+)(?:\.compact)?(?:\.crc)?$")
# State snapshots and changelogs: "V.zip", "V.changelog", ".V.zip.crc", ...
_STATE_FILE = re.compile(r"^\.?(\d+)\.(?:zip|changelog)(?:\.crc)?$")


class CopyRaced(RuntimeError):
    """A file the copy needed vanished while copying (log cleanup); the copy is retried."""


def _atomically(dst: Path, write) -> Path:
    """`write(tmp)` beside `dst`, then rename it into place: a copy that exists is complete even if
    the copying process was killed half-way (a later --resume trusts it)."""
    dst = Path(dst)
    tmp = dst.with_name(f".{dst.name}.partial")
    for leftover in (tmp, dst):
        if leftover.exists():
            shutil.rmtree(leftover)
    write(tmp)
    tmp.rename(dst)
    return dst


def copy_stopped(src: Path, dst: Path) -> Path:
    """Copy the checkpoint of a *stopped* query (rollback copies), atomically."""
    return _atomically(dst, lambda tmp: shutil.copytree(src, tmp))


def rollback_copy_live(src: Path, dst: Path) -> Path:
    """A rollback copy of a *running* query's checkpoint (`copy_live`), atomically."""
    return _atomically(dst, lambda tmp: copy_live(src, tmp))


def restore(copy: Path, ckpt: Path) -> None:
    """Put a copy back in place of the checkpoint; the copy is kept until the caller removes it.
    Copied beside the checkpoint first, then renamed into place: the checkpoint directory is
    never half-written, and of two restores at once (a rollback and the watchdog's resume) the
    second's rename fails instead of interleaving its files with the first's."""
    ckpt = Path(ckpt)
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    tmp, old = ckpt.with_name(f".{ckpt.name}.restoring-{tag}"), ckpt.with_name(f".{ckpt.name}.replaced-{tag}")
    shutil.copytree(copy, tmp)
    if ckpt.exists():
        ckpt.rename(old)
    tmp.rename(ckpt)
    shutil.rmtree(old, ignore_errors=True)


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
