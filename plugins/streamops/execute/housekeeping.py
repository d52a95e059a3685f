"""Files that grow without bound, removed once nothing can need them (`streamops gc`, the nightly DAG).

- Checkpoints: a directory under `data/checkpoints/` is garbage when it is not the checkpoint of
  any stage's latest run (per role) nor of a live run, not a staged copy that is ready, its stage
  has no reconfiguration pending or running (a rollback copy, or the checkpoint a switch leaves,
  is needed until the change is done), and it has not been modified for `min_age_s`. That covers
  the rollback copies of finished changes, the checkpoints a pre-staged or active-backup switch
  left behind, and copies a crash left half-written.
- Driver logs: those of runs that ended more than `log_keep_days` ago (a live run's log stays).
- Live logs (drivers, the supervisor, the Spark master and workers, PostgreSQL) rotated once
  past `max_bytes`: copied to `<name>.1` (older copies shift up to `keep`), then truncated in
  place. Every one of these processes writes its log with O_APPEND (`processes.spawn_detached`,
  `pg_ctl -l`), so it goes on at the new end of the file; lines written between the copy and
  the truncation are lost, as with logrotate's copytruncate. Signalling each writer to reopen
  its log would need a handler in every process, the JVMs' included.
- Checkpoint sizes: each stage's, walked by the supervisor at most once a minute into
  `checkpoint_sizes`, which `status --wide` and /metrics read (docs/jobs.md: what bounds them).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from streamops.paths import data_dir, state_dir
from streamops.store import db

log = logging.getLogger("streamops.housekeeping")

DEFAULT_LOG_MAX_BYTES = 64 << 20


@dataclass
class Collected:
    checkpoints: list[str] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    rotated: list[str] = field(default_factory=list)  # live logs rotated past the size limit
    bytes: int = 0


def _size(p: Path) -> int:
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def _stage_of(name: str, stages: set[str]) -> str | None:
    """The stage a checkpoint directory belongs to: its name is the stage id plus suffixes
    (.quarantine, .staged-N, .rollback-N, @replica-N), and stage ids hold no such characters."""
    return next((s for s in sorted(stages, key=len, reverse=True) if name == s or name.startswith((s + ".", s + "@"))),
                None)


def collect(min_age_s: float = 3600.0, log_keep_days: float = 14.0, dry_run: bool = False,
            log_max_bytes: int = DEFAULT_LOG_MAX_BYTES) -> Collected:
    """Remove (or with `dry_run` only list) the checkpoints and logs nothing needs any more, and
    rotate the live logs past `log_max_bytes`."""
    from streamops.checkpoint_layout import quarantine_checkpoint

    out = Collected()
    now = time.time()
    in_use = [r.path for r in db.rows("checkpoints_in_use")]
    busy_stages = {p[1:] for p in in_use if p.startswith("*")}
    keep = {str(Path(p)) for p in in_use if not p.startswith("*")}
    keep |= {str(quarantine_checkpoint(Path(p))) for p in keep}
    stages = {r.stage_id for r in db.rows("stage_ids")}
    root = data_dir() / "checkpoints"
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        stage = _stage_of(d.name.lstrip("."), stages)
        if (not d.is_dir() or str(d) in keep or stage in busy_stages or now - d.stat().st_mtime < min_age_s
                or (stage is None and not d.name.startswith("."))):  # not ours to judge: an unknown stage's
            continue
        out.checkpoints.append(str(d))
        out.bytes += _size(d)
        if not dry_run:
            shutil.rmtree(d, ignore_errors=True)
    live_logs = {r.log_path for r in db.rows("live_log_paths")}
    logs = state_dir() / "logs"
    for f in sorted(logs.glob("*.log")) if logs.is_dir() else []:
        if str(f) in live_logs or now - f.stat().st_mtime < log_keep_days * 86400:
            continue
        out.logs.append(str(f))
        out.bytes += f.stat().st_size
        if not dry_run:
            f.unlink(missing_ok=True)
    out.rotated = [str(f) for f in live_log_files() if f.stat().st_size > log_max_bytes] if dry_run \
        else rotate_logs(log_max_bytes)
    log.info("action=gc %s %d checkpoint(s) and %d log(s), %.1f MB; %d live log(s) rotated",
             "would remove" if dry_run else "removed", len(out.checkpoints), len(out.logs), out.bytes / 1e6,
             len(out.rotated))
    return out


def _walk(root: Path) -> tuple[int, int]:
    """(bytes, files) under `root`, without following links; files removed meanwhile (a state
    store's maintenance, a commit's rename) are skipped, not an error."""
    total = files = 0
    for d, _, names in os.walk(root):
        for n in names:
            try:
                total += os.lstat(os.path.join(d, n)).st_size
                files += 1
            except OSError:
                continue
    return total, files


def measure_checkpoints() -> list[dict]:
    """Per stage with a run: its checkpoint size on disk, as checkpoint_sizes holds it. `bytes`:
    the checkpoints of its latest run per role and their quarantine query's (what it resumes
    from); `disk_bytes`: that and every other directory of the stage under data/checkpoints/
    (rollback and staged copies, older runs', until `gc`). A walk: the supervisor's, once a minute."""
    from streamops.checkpoint_layout import quarantine_checkpoint

    started = time.monotonic()
    live: dict[str, set[Path]] = {}
    for r in db.rows("checkpoint_paths"):
        live.setdefault(r.stage_id, set()).update({Path(r.checkpoint), quarantine_checkpoint(Path(r.checkpoint))})
    others: dict[str, list[Path]] = {}
    root = data_dir() / "checkpoints"
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        stage = _stage_of(d.name.lstrip("."), set(live))
        if stage is not None and d.is_dir() and d not in live[stage]:
            others.setdefault(stage, []).append(d)
    out = []
    for stage, paths in sorted(live.items()):
        t0 = time.monotonic()
        sizes = [_walk(p) for p in paths if p.is_dir()]
        extra = sum(_walk(p)[0] for p in others.get(stage, []))
        used = sum(b for b, _ in sizes)
        out.append({"stage_id": stage, "bytes": used, "disk_bytes": used + extra, "files": sum(f for _, f in sizes),
                    "took_ms": (time.monotonic() - t0) * 1000})
    log.debug("action=checkpoint-sizes %d stage(s) in %.0f ms", len(out), (time.monotonic() - started) * 1000)
    return out


def record_checkpoint_sizes() -> list[dict]:
    """Measure (`measure_checkpoints`) and keep the sizes in checkpoint_sizes, for status and /metrics."""
    sizes = measure_checkpoints()
    db.bulk("checkpoint_sizes_record", sizes)
    return sizes


def live_log_files() -> list[Path]:
    """The logs our processes append to: `.streamops/logs/` (drivers, spares, the supervisor),
    `.streamops/spark/logs/` (the master and workers) and the embedded PostgreSQL's, wherever
    its data directory is. Airflow rotates its own."""
    from streamops.store import embedded

    files = [f for d in (state_dir() / "logs", state_dir() / "spark" / "logs") if d.is_dir() for f in d.glob("*.log")]
    c = embedded.load_record()
    if c is not None and Path(c.logfile).is_file():
        files.append(Path(c.logfile))
    return sorted(set(files))


def rotate_logs(max_bytes: int = DEFAULT_LOG_MAX_BYTES, keep: int = 2, files: list[Path] | None = None) -> list[str]:
    """Rotate every live log larger than `max_bytes` (copy, then truncate in place); returns the
    rotated paths."""
    rotated = []
    for f in live_log_files() if files is None else files:
        try:
            if f.stat().st_size <= max_bytes:
                continue
            for i in range(keep - 1, 0, -1):  # name.1 → name.2 …; the oldest falls off
                older = f.with_name(f"{f.name}.{i}")
                if older.exists():
                    older.replace(f.with_name(f"{f.name}.{i + 1}"))
            shutil.copyfile(f, f.with_name(f"{f.name}.1"))
            with open(f, "r+b") as live:
                live.truncate(0)
        except OSError as e:  # a log removed or unreadable meanwhile: the next pass looks again
            log.warning("action=rotate-log %s: %s", f, e)
            continue
        rotated.append(str(f))
        log.info("action=rotate-log %s (over %.0f MB): kept as %s.1", f, max_bytes / 1e6, f.name)
    return rotated

