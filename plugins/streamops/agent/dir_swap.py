"""Replace a directory whole: the Parquet sink's `batch_id=N` is the old batch or the new one,
never half of either, whatever step a crash (kill -9, the fenced exit) interrupts.

A batch is written into `<root>/_tmp/<name>.<run>.<uuid>` first. The swap is three renames on
one filesystem: the old directory aside (`….old`, in `_tmp` too), the new one in, the old one
deleted. A crash before the second rename leaves the old directory whole (in place, or aside until
`recover` puts it back); after it, the new one. Readers never look in `_tmp`: it matches no
`batch_id=*`, and Spark skips names starting with `_`.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from pathlib import Path

log = logging.getLogger(__name__)

STAGING = "_tmp"
ASIDE = ".old"
_ENTRY = re.compile(r"(?P<name>.+)\.(?P<run>\d+)\.[0-9a-f]{32}(?P<aside>\.old)?")


def staging_dir(root: Path, name: str, run: int | None) -> Path:
    """A fresh directory name for a new `<root>/<name>`, owned by `run` and this try alone."""
    return root / STAGING / f"{name}.{run or 0}.{uuid.uuid4().hex}"


def replace_dir(new: Path, final: Path) -> None:
    """Make `final` the (complete) directory `new`, replacing what `final` held."""
    aside = new.with_name(new.name + ASIDE)
    had_old = _move_aside(final, aside)
    _move_in(new, final)
    if had_old:
        _delete(aside)


def _move_aside(final: Path, aside: Path) -> bool:
    """Whether there was an old directory to move aside."""
    try:
        os.rename(final, aside)
    except FileNotFoundError:
        return False
    return True


def _move_in(new: Path, final: Path) -> None:
    # os.rename, not shutil.move: onto a directory that appeared meanwhile it fails (ENOTEMPTY)
    # instead of nesting `new` inside it.
    os.rename(new, final)


def _delete(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def recover(root: Path, run: int | None) -> None:
    """At a run's first write: finish what a crashed run left in `<root>/_tmp`. An old directory
    aside whose place is empty goes back (the crash came between the two renames); an aside whose
    place is filled, and older runs' staged batches, are deleted. A newer run's entries are left
    alone: that run may be writing them (and it fences this one)."""
    for entry in sorted((root / STAGING).glob("*")):
        m = _ENTRY.fullmatch(entry.name)
        if m is None or int(m["run"]) > (run or 0):
            continue
        final = root / m["name"]
        if m["aside"] and not final.exists():
            log.warning("%s: put back from %s (a run died in its swap)", final, entry.name)
            _move_in(entry, final)
        elif m["aside"] or int(m["run"]) < (run or 0):
            _delete(entry)
