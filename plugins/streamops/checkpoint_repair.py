"""Repair of a torn checkpoint before a start (issue 48): a crash (a power loss, a full disk) can
leave the newest entry of a log half-written, and every later start then fails on it.

Only the newest entries are moved aside, never deleted (into `<ckpt>/_torn/<UTC time>/`, with
their .crc): `offsets/N` with its `commits/N`, a `commits/N` alone, the file source's
`sources/0/N[.compact]` with the batch that planned it, and the state metadata
(`state/<op>/_metadata/metadata`, `state/<op>/<partition>/_metadata/schema`), which Spark writes
again. The query then re-plans batch N from the last intact one, and the sink (idempotent by
batch) keeps exactly-once. A torn entry in the middle of a log is refused (`CheckpointTorn`): it
is not a crash's doing, and moving it would drop intact batches after it. Pure: no Spark, no
database; the driver and the control plane both call it.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import struct
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from streamops.checkpoint_layout import QUERIES, CheckpointUnreadable, parse, query_checkpoint, read_entry

log = logging.getLogger("streamops.checkpoint")

ASIDE = "_torn"  # <ckpt>/_torn/<time>/<path in the checkpoint>: what a repair moved aside
_ENTRY = re.compile(r"^(\d+)(\.compact)?$")


class CheckpointTorn(RuntimeError):
    """A torn checkpoint that a repair must not touch; the message names the file and the fix."""


@dataclass(frozen=True)
class Moved:
    query: str  # main | quarantine
    path: str  # in the query's checkpoint: "offsets/7"
    why: str


def describe(moved: list[Moved]) -> str:
    return "; ".join(f"{m.query} {m.path} ({m.why})" for m in moved)


# -- is an entry intact, as Spark reads it? ---------------------------------------------------------
def torn(path: Path) -> str | None:
    """Why the checkpoint file `path` is not what Spark writes, or None when it is intact."""
    try:
        if path.name == "schema":
            return _torn_schema(path.read_bytes())
        if path.name == "metadata" and path.parent.name != "_metadata":  # the query's id: one JSON line
            return None if "id" in parse(path, path.read_text()) else "no query id"
        lines = read_entry(path)
        if not lines:
            return "no entry after the version line"
        if path.read_bytes().endswith(b"\n"):  # Spark never ends an entry with a newline
            return "ends in an empty line"
        for line in lines:
            if not (path.parent.name == "offsets" and line == "-"):  # "-": a source without an offset yet
                parse(path, line)
        if path.parent.name == "offsets" and len(lines) < 2:
            return "no source offset after the batch's metadata"
    except (CheckpointUnreadable, UnicodeDecodeError, struct.error) as e:
        return getattr(e, "why", None) or f"{type(e).__name__}: {e}"
    return None


def _torn_schema(data: bytes) -> str | None:
    """A state schema file: writeUTF(version), then (v2) key and value schemas, each an int count
    of chunks and the chunks as writeUTF; v1 holds the two schemas as writeUTF."""
    at, strings = 0, []

    def utf() -> str:
        nonlocal at
        (n,) = struct.unpack_from(">H", data, at)
        if at + 2 + n > len(data):
            raise struct.error("cut short")
        at += 2 + n
        return data[at - n:at].decode("utf-8")

    version = utf()
    for _ in range(2):
        if version == "v1":
            strings.append(utf())
        else:
            (chunks,) = struct.unpack_from(">i", data, at)
            at += 4
            strings.append("".join(utf() for _ in range(chunks)))
    try:
        [json.loads(s) for s in strings]
    except json.JSONDecodeError as e:
        return f"schema: {e.msg}"
    return None if at == len(data) else "trailing bytes"


# -- the repair -----------------------------------------------------------------------------------
def _entries(log_dir: Path) -> list[Path]:
    """The log's entries, oldest first (a compaction sorts as its batch)."""
    try:
        found = [p for p in log_dir.iterdir() if _ENTRY.match(p.name)]
    except FileNotFoundError:
        return []
    return sorted(found, key=lambda p: int(p.name.split(".")[0]))


def _batch(p: Path) -> int:
    return int(p.name.split(".")[0])


def _refuse(ckpt: Path, path: Path, why: str) -> CheckpointTorn:
    return CheckpointTorn(
        f"{path}: torn ({why}) but not the newest entry of its log, so it is not a crash's half-written "
        f"file and the start is refused: moving it aside would drop the intact batches after it. Fix: "
        f"restore {ckpt} from a rollback copy, or move {path} and every later entry of {path.parent} "
        f"(with the batches' offsets/ and commits/) aside by hand, then start the stage again")


class _Repair:
    """One query checkpoint's repair: checks first (refusing before anything moves), then moves."""

    def __init__(self, ckpt: Path, query: str, stamp: str):
        self.ckpt, self.query, self.aside = ckpt, query, ckpt / ASIDE / stamp
        self.moved: list[Moved] = []

    def run(self) -> list[Moved]:
        logs = [self.ckpt / "offsets", self.ckpt / "commits", *sorted((self.ckpt / "sources").glob("[0-9]*"))]
        torn_newest = {d: self._check_log(d) for d in logs}
        for d in logs[2:]:  # a source log first: the batches that planned it go with it
            if (torn := torn_newest[d]) is not None:
                self._move_source_entry(d, *torn)
        for d in logs[:2]:
            if (torn := torn_newest[d]) is None or not torn[0].exists():  # gone with its source entry
                continue
            path, why = torn
            if d.name == "offsets":
                self._move_batch(_batch(path), why)
            else:
                self._move(path, why)
        self._commit_without_offsets()
        self._state_metadata()
        self._query_metadata()
        return self.moved

    def _check_log(self, log_dir: Path) -> tuple[Path, str] | None:
        """The log's torn newest entry with why, or None; a torn entry before it is refused."""
        entries = _entries(log_dir)
        for i, p in enumerate(entries):
            why = torn(p)
            if why is not None and i < len(entries) - 1:
                raise _refuse(self.ckpt, p, why)
            if why is not None:
                return p, why
        return None

    def _move(self, path: Path, why: str) -> None:
        """`path` and its .crc into the aside directory, at the same place in the checkpoint."""
        rel = path.relative_to(self.ckpt)
        for p in (path, path.with_name(f".{path.name}.crc")):
            if p.exists():
                dst = self.aside / p.relative_to(self.ckpt)
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(p, dst)
        self.moved.append(Moved(self.query, str(rel), why))

    def _move_batch(self, n: int, why: str) -> None:
        """offsets/N and its commits/N: batch N is planned again from the last intact one."""
        self._move(self.ckpt / "offsets" / str(n), why)
        if (self.ckpt / "commits" / str(n)).exists():
            self._move(self.ckpt / "commits" / str(n), f"the commit of the torn offsets/{n}")

    def _move_source_entry(self, log_dir: Path, path: Path, why: str) -> None:
        """A torn newest source log entry, and every batch planned up to it (their offsets name it)."""
        n = _batch(path)
        if path.name.endswith(".compact") and not self._complete_before(log_dir, n):
            raise CheckpointTorn(f"{path}: torn ({why}), and the entries it compacted are cleaned up: nothing "
                                 f"to plan again from. Fix: restore {self.ckpt} from a rollback copy")
        self._move(path, why)
        source = int(log_dir.name)
        for off in reversed(_entries(self.ckpt / "offsets")):
            if self._log_offset(off, source) < n:
                break
            self._move_batch(_batch(off), f"planned the torn {path.relative_to(self.ckpt)}")

    @staticmethod
    def _complete_before(log_dir: Path, n: int) -> bool:
        """Are the entries before batch n all there, from the latest compaction (or 0) on?"""
        have = {_batch(p): p.name for p in _entries(log_dir) if _batch(p) < n}
        base = max((b for b, name in have.items() if name.endswith(".compact")), default=0)
        return all(b in have for b in range(base, n))

    def _log_offset(self, offsets: Path, source: int) -> int:
        """The source's offset in a batch's offsets entry (the file source's `logOffset`)."""
        lines = read_entry(offsets)
        value = lines[1 + source] if len(lines) > 1 + source else "-"
        return -1 if value == "-" else int(parse(offsets, value).get("logOffset", -1))

    def _commit_without_offsets(self) -> None:
        offsets, commits = _entries(self.ckpt / "offsets"), _entries(self.ckpt / "commits")
        newest = _batch(offsets[-1]) if offsets else -1
        for c in reversed(commits):
            if _batch(c) <= newest:
                break
            self._move(c, f"no offsets/{_batch(c)} for it")

    def _state_metadata(self) -> None:
        """Operator metadata and state schema files: Spark writes them again when they are missing."""
        state = self.ckpt / "state"
        found = sorted(state.glob("*/_metadata/metadata")) + sorted(state.glob("*/*/_metadata/schema")) \
            if state.is_dir() else []
        for path in sorted(found, key=lambda p: str(p.relative_to(self.ckpt))):
            why = torn(path)
            if why is not None:
                self._move(path, why)

    def _query_metadata(self) -> None:
        """The query's id (`metadata`): Spark refuses logs without it, so a torn one is kept aside
        and replaced by a new id (the state and the logs do not depend on it)."""
        path = self.ckpt / "metadata"
        why = torn(path) if path.exists() else None
        if why is not None:
            self._move(path, f"{why}; a new query id is written")
            path.write_text(json.dumps({"id": str(uuid.uuid4())}))


def repair_query(ckpt: Path, query: str = "main", stamp: str | None = None) -> list[Moved]:
    """Move the torn newest entries of one query checkpoint aside; what was moved (empty: intact).
    Raises CheckpointTorn, before anything moves, for a torn entry that is not the newest."""
    ckpt = Path(ckpt)
    if not ckpt.is_dir():
        return []
    stamp = stamp or datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    moved = _Repair(ckpt, query, stamp).run()
    if moved:
        log.warning("action=checkpoint-repair checkpoint=%s moved aside into %s: %s", ckpt, ckpt / ASIDE / stamp,
                    describe(moved))
    return moved


def repair_stage(ckpt: Path) -> list[Moved]:
    """Both query checkpoints of a stage (main, quarantine); call it only while no run uses them."""
    return [m for which in QUERIES for m in repair_query(query_checkpoint(which, ckpt), which)]
