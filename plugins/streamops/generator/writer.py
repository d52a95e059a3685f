"""Write replayable JSON-lines input files for Spark file-source stages: the tick loop whose
row counts follow a rate trace, paced in real time or written at once, resumable.

The files, the staging area and the ground-truth manifest are laid out as `manifest`
describes; a run is resumed from its manifest (and from a file published but not yet listed).

Determinism: the records of tick i come from an RNG seeded by (seed, run, kind, i), so
the same seed + start + args give byte-identical files, and a resumed run writes the
same ticks an uninterrupted run would have (given the same event-time origin).
"""

from __future__ import annotations

import math
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from .manifest import (
    MANIFEST_DIR,
    STAGING_DIR,
    append_line,
    data_file_name,
    fsync_dir,
    read_jsonl,
    read_manifest,
    read_valid_records,
    repair_manifest,
    write_synced,
)
from .records import (
    KINDS,
    check_kind,
    dumps,
    format_ts,
    garbage_line,
    line_id,
    make_records,
    parse_valid,
    record_id,
    ts_to_ms,
)
from .traces import Trace, TraceSpec, integrate, make_trace

try:  # advisory lock against two writers on one run; POSIX only
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX
    fcntl = None  # type: ignore[assignment]

_RUN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_EPS = 1e-9  # absorbs float error so 0.5 + 0.5 rows counts as 1 row

TraceArg = Callable[[float], float] | TraceSpec | str
OnTick = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class GenerateSummary:
    run: str
    out_dir: Path
    files: int  # files published by this call
    rows: int
    valid: int
    garbage: int
    elapsed: float  # wall seconds
    first_tick: int  # first tick written by this call (> 0 when resuming)
    next_tick: int  # where a later call with the same run will continue
    stopped: bool  # True if stop_event ended the run early


@dataclass
class _State:
    """Where the run stands: what the next tick/id is and the fractional row carried over."""

    next_tick: int = 0
    next_seq: int = 0
    carry: float = 0.0
    origin: datetime | None = None


def default_run(seed: int) -> str:
    return f"s{seed}"


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# ---------------------------------------------------------------------------
# Generator
# ---------------------------------------------------------------------------


def _tick_rng(seed: int, run: str, kind: str, tick: int, purpose: str) -> random.Random:
    # String seeds hash with SHA-512 in Random, so this is stable across processes.
    return random.Random(f"streamops-gen|{seed}|{run}|{kind}|{tick}|{purpose}")


def _resolve_trace(trace: TraceArg) -> Callable[[float], float]:
    if isinstance(trace, (TraceSpec, str)):
        return make_trace(trace)
    if not callable(trace):
        raise ValueError(f"trace must be a TraceSpec, a trace string or a callable, got {trace!r}")
    return trace


class Generator:
    """Publishes one JSON-lines file per tick whose row count follows a rate trace."""

    def __init__(
        self,
        out_dir: Path | str,
        kind: str,
        trace: TraceArg,
        *,
        seed: int,
        duration_s: float,
        tick_s: float = 1.0,
        garbage_fraction: float = 0.0,
        start: datetime | None = None,
        realtime: bool = True,
        run: str | None = None,
        on_tick: OnTick | None = None,
        stop_event: threading.Event | None = None,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.kind = check_kind(kind)
        self.trace = _resolve_trace(trace)
        self.seed = int(seed)
        if not (math.isfinite(duration_s) and duration_s >= 0):
            raise ValueError(f"duration_s must be >= 0, got {duration_s!r}")
        if not (math.isfinite(tick_s) and tick_s >= 0.001):
            raise ValueError(f"tick_s must be >= 0.001 (event times have millisecond resolution), got {tick_s!r}")
        if not 0.0 <= garbage_fraction <= 1.0:
            raise ValueError(f"garbage_fraction must be in [0, 1], got {garbage_fraction!r}")
        if start is not None and start.tzinfo is None:
            raise ValueError(f"start must be timezone-aware (UTC), got naive {start!r}")
        self.run_id = run if run is not None else default_run(self.seed)
        if not _RUN_RE.match(self.run_id):
            raise ValueError(f"run must match {_RUN_RE.pattern} (it is part of file names and ids), "
                             f"got {self.run_id!r}")
        self.duration_s = float(duration_s)
        self.tick_s = float(tick_s)
        self.garbage_fraction = float(garbage_fraction)
        self.start = start.astimezone(UTC) if start is not None else None
        self.realtime = realtime
        self.on_tick = on_tick
        self.stop_event = stop_event
        self.manifest_path = self.out_dir / MANIFEST_DIR / f"{self.run_id}.jsonl"
        self.staging_dir = self.out_dir / STAGING_DIR

    # -- public ------------------------------------------------------------

    def run(self) -> GenerateSummary:
        began = time.monotonic()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.manifest_path.parent.mkdir(exist_ok=True)
        self.staging_dir.mkdir(exist_ok=True)
        with self._lock():
            state = self._load_state()
            self._clear_staging()
            origin = self._resolve_origin(state)
            paced_from = time.monotonic()  # tick k is published at paced_from + (k+1)*tick_s
            counts, stopped, first_tick = [0, 0, 0, 0], False, state.next_tick
            for k in range(self._tick_count()):
                if self._stopped():
                    stopped = True
                    break
                entry, payload, new_state = self._build_tick(state, origin)
                tmp = self._stage(entry["file"], payload)
                if self.realtime and self._wait_until(paced_from + (k + 1) * self.tick_s):
                    self._discard(tmp)  # stopped mid-tick: the tick is never published
                    stopped = True
                    break
                self._publish(tmp, entry)
                state = new_state
                counts = [counts[0] + 1, counts[1] + entry["rows"], counts[2] + entry["valid"],
                          counts[3] + entry["garbage"]]
                if self.on_tick is not None:
                    self.on_tick(entry)
        return GenerateSummary(
            run=self.run_id,
            out_dir=self.out_dir,
            files=counts[0],
            rows=counts[1],
            valid=counts[2],
            garbage=counts[3],
            elapsed=time.monotonic() - began,
            first_tick=first_tick,
            next_tick=state.next_tick,
            stopped=stopped,
        )

    # -- run state ------------------------------------------------------------

    @contextmanager
    def _lock(self) -> Iterator[None]:
        """Refuse to run two writers on one run (they would race on ticks and the manifest)."""
        with open(self.manifest_path.with_suffix(".lock"), "a") as f:
            if fcntl is not None:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    raise RuntimeError(f"another generator is writing run {self.run_id!r} in {self.out_dir}") from None
            yield  # closing the file releases the flock

    def _load_state(self) -> _State:
        """Continue after the last published tick of this run (resume), repairing crash leftovers."""
        repair_manifest(self.manifest_path)
        entries = read_jsonl(self.manifest_path) if self.manifest_path.exists() else []
        state = _State()
        if entries:
            last = entries[-1]
            if last.get("kind") != self.kind or last.get("tick_s") != self.tick_s:
                raise ValueError(
                    f"run {self.run_id!r} in {self.out_dir} was written with kind={last.get('kind')!r} "
                    f"tick_s={last.get('tick_s')!r}; resume with the same values or use another run"
                )
            state = _State(
                next_tick=last["tick"] + 1,
                next_seq=last["seq_start"] + last["rows"],
                carry=last["carry"],
                origin=_parse_iso(last["origin"]),
            )
        # A crash between os.replace and the manifest append leaves a published, unlisted file.
        while (self.out_dir / data_file_name(self.run_id, state.next_tick)).exists():
            state = self._recover_orphan(state)
        return state

    def _recover_orphan(self, state: _State) -> _State:
        """Rebuild the manifest entry of a published file from its content."""
        i = state.next_tick
        name = data_file_name(self.run_id, i)
        lines = (self.out_dir / name).read_text(encoding="utf-8").splitlines()
        valid = [r for r in (parse_valid(self.kind, ln) for ln in lines) if r is not None]
        garbage_ids = [line_id(ln) or "" for ln in lines if parse_valid(self.kind, ln) is None]
        origin = state.origin or self.start or _now()
        carry = max(0.0, state.carry + self._expected_rows(i) - len(lines))
        entry = self._entry(
            i, name, state.next_seq, len(lines), valid, garbage_ids, ["recovered"] * len(garbage_ids), carry, origin
        )
        entry["first_id"] = record_id(self.run_id, state.next_seq) if lines else None
        entry["last_id"] = record_id(self.run_id, state.next_seq + len(lines) - 1) if lines else None
        entry["recovered"] = True
        entry["published_at"] = format_ts((self.out_dir / name).stat().st_mtime_ns // 1_000_000)
        append_line(self.manifest_path, entry)
        return _State(i + 1, state.next_seq + len(lines), carry, origin)

    def _clear_staging(self) -> None:
        for p in self.staging_dir.glob(f"part-{self.run_id}-*.tmp"):
            p.unlink(missing_ok=True)

    def _resolve_origin(self, state: _State) -> datetime:
        """Event-time origin: tick i covers [origin + i*tick_s, origin + (i+1)*tick_s)."""
        if self.start is not None:
            return self.start
        if self.realtime:
            # Event time tracks the wall clock, also after a resume: the next tick starts now.
            return _now() - timedelta(seconds=state.next_tick * self.tick_s)
        return state.origin or _now()

    def _tick_count(self) -> int:
        return max(0, math.ceil(self.duration_s / self.tick_s - _EPS))

    # -- one tick -------------------------------------------------------------

    def _expected_rows(self, tick: int) -> float:
        return integrate(self.trace, tick * self.tick_s, (tick + 1) * self.tick_s)

    def _build_tick(self, state: _State, origin: datetime) -> tuple[dict[str, Any], bytes, _State]:
        i = state.next_tick
        total = state.carry + self._expected_rows(i)
        rows = int(math.floor(total + _EPS))
        carry = max(0.0, total - rows)
        records = make_records(
            self.kind,
            rows,
            rng=_tick_rng(self.seed, self.run_id, self.kind, i, "records"),
            start_seq=state.next_seq,
            run=self.run_id,
            ts_from=origin + timedelta(seconds=i * self.tick_s),
            ts_to=origin + timedelta(seconds=(i + 1) * self.tick_s),
        )
        rng = _tick_rng(self.seed, self.run_id, self.kind, i, "garbage")
        lines, valid, garbage_ids, reasons = self._corrupt(records, rng)
        name = data_file_name(self.run_id, i)
        entry = self._entry(i, name, state.next_seq, rows, valid, garbage_ids, reasons, carry, origin)
        entry["first_id"] = records[0]["id"] if records else None
        entry["last_id"] = records[-1]["id"] if records else None
        payload = "".join(line + "\n" for line in lines).encode("utf-8")
        return entry, payload, _State(i + 1, state.next_seq + rows, carry, origin)

    def _corrupt(
        self, records: list[dict[str, Any]], rng: random.Random
    ) -> tuple[list[str], list[dict[str, Any]], list[str], list[str]]:
        """Turn a garbage_fraction share of records into malformed lines (separate RNG, so the
        valid records are the same whatever the fraction)."""
        lines: list[str] = []
        valid: list[dict[str, Any]] = []
        garbage_ids: list[str] = []
        reasons: list[str] = []
        for rec in records:
            if self.garbage_fraction > 0 and rng.random() < self.garbage_fraction:
                line, reason = garbage_line(rng, rec, self.kind)
                lines.append(line)
                garbage_ids.append(rec["id"])
                reasons.append(reason)
            else:
                lines.append(dumps(rec))
                valid.append(rec)
        return lines, valid, garbage_ids, reasons

    def _entry(
        self,
        tick: int,
        name: str,
        seq_start: int,
        rows: int,
        valid: list[dict[str, Any]],
        garbage_ids: list[str],
        reasons: list[str],
        carry: float,
        origin: datetime,
    ) -> dict[str, Any]:
        stamps = [ts_to_ms(r["ts"]) for r in valid]
        return {
            "file": name,
            "tick": tick,
            "rows": rows,
            "valid": len(valid),
            "garbage": len(garbage_ids),
            "first_id": None,
            "last_id": None,
            "garbage_ids": garbage_ids,
            "ts_min": format_ts(min(stamps)) if stamps else None,
            "ts_max": format_ts(max(stamps)) if stamps else None,
            "published_at": None,
            "run": self.run_id,
            "kind": self.kind,
            "seed": self.seed,
            "tick_s": self.tick_s,
            "t": tick * self.tick_s,
            "window_start": _iso(origin + timedelta(seconds=tick * self.tick_s)),
            "window_end": _iso(origin + timedelta(seconds=(tick + 1) * self.tick_s)),
            "seq_start": seq_start,
            "carry": carry,
            "origin": _iso(origin),
            "trace": str(self.trace.spec) if isinstance(self.trace, Trace) else "custom",
            "garbage_reasons": reasons,
        }

    # -- publishing -------------------------------------------------------------

    def _stage(self, name: str, payload: bytes) -> Any:  # what _publish takes: here a staged file
        tmp = self.staging_dir / f"{name}.tmp"
        write_synced(tmp, payload)
        return tmp

    def _discard(self, tmp: Any) -> None:
        tmp.unlink(missing_ok=True)

    def _publish(self, tmp: Any, entry: dict[str, Any]) -> None:
        os.replace(tmp, self.out_dir / entry["file"])
        fsync_dir(self.out_dir)
        entry["published_at"] = format_ts(epoch_ms_now())
        append_line(self.manifest_path, entry)

    # -- pacing -------------------------------------------------------------------

    def _stopped(self) -> bool:
        return self.stop_event is not None and self.stop_event.is_set()

    def _wait_until(self, deadline: float) -> bool:
        """Sleep until the monotonic deadline; True if stop_event fired meanwhile."""
        remaining = deadline - time.monotonic()
        if remaining > 0:
            if self.stop_event is not None:
                return self.stop_event.wait(remaining)
            time.sleep(remaining)
        return self._stopped()


def epoch_ms_now() -> int:
    return time.time_ns() // 1_000_000


def generate(
    out_dir: Path | str,
    kind: str,
    trace: TraceArg,
    *,
    seed: int,
    duration_s: float,
    tick_s: float = 1.0,
    garbage_fraction: float = 0.0,
    start: datetime | None = None,
    realtime: bool = True,
    run: str | None = None,
    on_tick: OnTick | None = None,
    stop_event: threading.Event | None = None,
) -> GenerateSummary:
    """Write `duration_s` worth of ticks (resuming the run if it already has files) and summarize."""
    return Generator(
        out_dir,
        kind,
        trace,
        seed=seed,
        duration_s=duration_s,
        tick_s=tick_s,
        garbage_fraction=garbage_fraction,
        start=start,
        realtime=realtime,
        run=run,
        on_tick=on_tick,
        stop_event=stop_event,
    ).run()


__all__ = [
    "KINDS",
    "GenerateSummary",
    "Generator",
    "data_file_name",
    "default_run",
    "generate",
    "read_manifest",
    "read_valid_records",
]
