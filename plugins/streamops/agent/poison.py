"""Failed batches in the driver: retry them, and quarantine one whole when it keeps failing the
same way, so that no input file can stop a stage for good.

A batch that fails is replayed by every restart with the same files, so a deterministic failure
(a value no sink accepts, a record that crashes the code) would fail every run forever: a poison
pill. The driver counts failures per batch and error (`batch_failures`); at the stage's
`poison_after_failures` the batch is bisected by file with dry runs (`isolate`), the files that
fail alone are written to `quarantine` line by line with the error as the reason, and the
restarted query leaves those files out. When no file fails alone, nothing is quarantined: the
run fails with the error's class and the supervisor restarts it (a dry run has no checkpoint
and no state, so an infrastructure error never fails alone).

Two guards keep a broken *run* from quarantining good data:
- a configuration that has never committed (a reconfiguration's new run on trial, when another
  configuration has) does not quarantine: it fails, and the rollback decides;
- a batch right after one quarantined with the same error is not quarantined: two in a row
  point at the run, not the data; the run fails and the watchdog takes over.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine

from streamops.agent.sinks import quarantine_values, record_key, write_quarantine
from streamops.records import BATCH_FAILED, RecordSchema, check_line
from streamops.store import db

log = logging.getLogger("streamops.poison")

_ERROR_LINE = re.compile(r"^\s*([\w.]+(?:Error|Exception)): (.+)$")
# Ids that differ between two failures of the same batch: query and run ids, object ids, task ids.
_VOLATILE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|0x[0-9a-f]+|TID \d+"
                       r"|task \d+(\.\d+)?")


def root_cause(text: str) -> str:
    """The innermost `SomeError: message` line of a (py4j-wrapped) traceback, else its first line."""
    causes = [m.group(0).strip() for line in text.splitlines() if (m := _ERROR_LINE.match(line))]
    causes = [c for c in causes if "Py4J" not in c and "StreamingQueryException" not in c]
    return causes[-1] if causes else (text.splitlines()[0] if text else "no exception")


def error_signature(text: str) -> str:
    """What makes two failures 'the same error': the root cause without volatile ids."""
    return _VOLATILE.sub("…", root_cause(text))[:500]


# What an output gap is named by (execute/gaps.cause_of), wherever it is in a traceback: a full
# checkpoint disk under a state store's commit reaches the driver as the foreachBatch function's
# error, whose innermost `…Exception:` line says "An exception was raised by the Python Proxy".
_TELLING = ("No space left on device", "Disk quota exceeded", "could not connect to server", "Connection refused",
            "server closed the connection", "terminating connection", "the database system is")


def telling_error(text: str) -> str:
    """A query's failure as its run's beats name it: the first line that says a full disk or a
    database away, else its `error_signature`."""
    line = next((ln.strip() for ln in text.splitlines() if any(m in ln for m in _TELLING)), None)
    return _VOLATILE.sub("…", line)[:500] if line else error_signature(text)


@dataclass(frozen=True)
class FailedBatch:
    query: str          # main | quarantine
    batch_id: int
    files: tuple[str, ...]
    error: str          # error_signature
    error_class: str = ""  # errors.classify's, for the failure's detail


@dataclass(frozen=True)
class Verdict:
    action: str          # retry | quarantine | fail
    attempts: int
    why: str


def judge(fb: FailedBatch, attempts: int, poison_after: int, *, previous_same: bool, config_committed: bool,
          any_committed: bool) -> Verdict:
    """Pure rule: retry the batch, quarantine it whole, or fail the run."""
    if poison_after <= 0:
        return Verdict("fail", attempts, "poison_after_failures is 0: the stage fails instead")
    if attempts < poison_after:
        return Verdict("retry", attempts, f"attempt {attempts} of {poison_after}")
    if any_committed and not config_committed:
        return Verdict("fail", attempts, "this configuration has never committed a batch: it is on trial, and "
                                         "the failure may be the configuration's; not quarantining")
    if previous_same:
        return Verdict("fail", attempts, f"batch {fb.batch_id - 1} was quarantined for the same error: the run is "
                                         "broken, not the data; not quarantining another batch")
    return Verdict("quarantine", attempts, f"failed {attempts} times in a row with the same error")


class PoisonBook:
    """The driver's record of its failed batches, in PostgreSQL."""

    def __init__(self, engine: Engine | None, stage_id: str, deployment_id: int | None, family: RecordSchema,
                 max_record_bytes: int, role: str = "primary"):
        self.engine, self.stage_id, self.deployment_id, self.role = engine, stage_id, deployment_id, role
        self.family, self.max_record_bytes = family, max_record_bytes
        self.failure_id: int | None = None  # the open `failures` row of this run's failed batches

    def excluded_files(self) -> dict[str, list[str]]:
        """query → files to leave out: those of batches quarantined whole, by any run of the stage."""
        out: dict[str, list[str]] = {"main": [], "quarantine": []}
        with db.connection(self.engine) as conn:
            for r in conn.execute(db.query("poison_files"), {"stage_id": self.stage_id}):
                out[r.query].append(r.file)
        return out

    def record(self, fb: FailedBatch, poison_after: int) -> Verdict:
        params = {"stage_id": self.stage_id, "role": self.role, "query": fb.query, "batch_id": fb.batch_id,
                  "error": fb.error, "deployment_id": self.deployment_id}
        with db.transaction(self.engine) as conn:
            attempts = conn.execute(db.query("batch_failure_record"), {**params, "files": list(fb.files)}).scalar_one()
            facts = conn.execute(db.query("poison_guard"), params).one()
            verdict = judge(fb, attempts, poison_after, previous_same=facts.previous_same,
                            config_committed=facts.config_committed, any_committed=facts.any_committed)
            cls = f" [{fb.error_class}]" if fb.error_class else ""
            detail = f"{fb.query} query, batch {fb.batch_id}: {fb.error}{cls} ({verdict.why})"
            self.failure_id = conn.execute(db.query("failure_batch_open"), {
                "stage_id": self.stage_id, "deployment_id": self.deployment_id, "detail": detail[:2000]}).scalar_one()
        log.warning("stage %s: action=batch-failed query=%s batch=%d attempt=%d next=%s: %s", self.stage_id,
                    fb.query, fb.batch_id, attempts, verdict.action, fb.error)
        return verdict

    def quarantine(self, fb: FailedBatch, attempts: int, files: tuple[str, ...] | None = None) -> int:
        """Write the lines of the batch's `files` (default: all of them; `isolate` finds the ones
        to blame) to `quarantine`: every line for the main query (none of them reached the sink),
        the invalid ones only for the quarantine query (the valid ones did). Every run then
        leaves those files out. Returns the rows written."""
        files = tuple(files or fb.files)
        whole = set(files) == set(fb.files)
        reason = (f"{BATCH_FAILED}: batch {fb.batch_id} of the {fb.query} query failed {attempts} times: {fb.error}"
                  + ("" if whole else f" (this file failed the same way alone; {len(fb.files) - len(files)} other "
                                      f"file(s) of the batch were not to blame)"))
        rows = []
        for f in files:
            seen: dict[bytes, int] = {}
            for raw in _lines(Path(f)):
                seen[raw] = seen.get(raw, 0) + 1
                if fb.query == "main":
                    kind, why = BATCH_FAILED, reason
                else:
                    v = check_line(self.family, raw, self.max_record_bytes)
                    if v.kind is None:  # valid: no reason kind
                        continue
                    kind, why = v.kind, f"{v.reason} (written by the driver: {reason})"
                rows.append(quarantine_values(self.stage_id, self.deployment_id, fb.batch_id, f, raw,
                                              record_key(f, raw, seen[raw]), kind, why))
        added = write_quarantine(db.writer_dsn(), rows)
        with db.transaction(self.engine) as conn:
            conn.execute(db.query("batch_failure_quarantined"), {"stage_id": self.stage_id, "role": self.role,
                                                                 "query": fb.query, "batch_id": fb.batch_id,
                                                                 "rows": len(rows),
                                                                 "files": None if whole else list(files)})
        log.warning("stage %s: action=quarantine-batch query=%s batch=%d files=%d of %d lines=%d (new %d): %s",
                    self.stage_id, fb.query, fb.batch_id, len(files), len(fb.files), len(rows), added, fb.error)
        return len(rows)

    def not_blamed(self, fb: FailedBatch, why: str) -> None:
        """No file of the batch failed alone: nothing quarantined; the run's failure says so."""
        if self.failure_id is not None:
            with db.transaction(self.engine) as conn:
                conn.execute(db.query("failure_note"), {"id": self.failure_id, "note": why})
        log.error("stage %s: action=not-quarantined query=%s batch=%d: %s", self.stage_id, fb.query, fb.batch_id,
                  why)

    def committed(self, query: str, batch_id: int) -> None:
        """A batch committed: failed batches up to it are behind us, and so is the run's failure."""
        with db.transaction(self.engine) as conn:
            conn.execute(db.query("batch_failures_passed"), {"stage_id": self.stage_id, "role": self.role,
                                                             "query": query, "committed": batch_id})
            if self.failure_id is not None:
                r = conn.execute(db.query("failure_recovered"), {"id": self.failure_id, "at": None,
                                                                 "deployment_id": self.deployment_id}).first()
                if r is not None:
                    log.info("stage %s: action=recovered failure=%d mttr=%.1fs", self.stage_id, self.failure_id,
                             (r.mttr_ms or 0) / 1000)
        self.failure_id = None


def isolate(files: tuple[str, ...], error: str, fails_alone: Callable[[tuple[str, ...]], str | None],
            budget: int = 32) -> tuple[str, ...]:
    """The files of a failed batch to blame: bisect them, asking `fails_alone(subset)` (a dry run
    of those files' output; the error signature it raised, or None) and keeping the subsets that
    fail with the batch's own `error`. A file is blamed only when it fails alone, a batch of one
    file too. None may: the failure needs files together, or the run's checkpoint and state,
    which a dry run has not (an infrastructure error). Then nothing is blamed, and past `budget`
    dry runs only the files found so far: valid records are never quarantined on a guess."""
    runs, found = 0, []

    def blame(subset: tuple[str, ...]) -> None:
        nonlocal runs
        if runs >= budget:
            raise _OverBudget
        runs += 1
        if fails_alone(subset) != error:
            return
        if len(subset) == 1:
            found.append(subset[0])
            return
        half = len(subset) // 2
        blame(subset[:half])
        blame(subset[half:])

    try:
        if len(files) == 1:
            blame(files)
        else:
            blame(files[: len(files) // 2])
            blame(files[len(files) // 2:])
    except _OverBudget:
        log.warning("action=isolate gave up after %d dry runs: %d file(s) found to fail alone", runs, len(found))
    return tuple(found)


class _OverBudget(Exception):
    pass


def _lines(path: Path) -> list[bytes]:
    """The lines of an input file as Spark's text source splits them (\\n, \\r\\n or \\r)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return data.splitlines()
