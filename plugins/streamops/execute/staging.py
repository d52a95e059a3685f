"""[001] State Manager: pre-staged checkpoint copies. A copy of the running stage's checkpoint,
consistent as of its last committed batch and repartitioned off to the side, lets a later
scale-out skip the copy and the repartition in its outage."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from streamops import registry
from streamops.execute import checkpoint
from streamops.paths import REPO_ROOT
from streamops.plan.mechanism import STAGED_MAX_LAG_BATCHES, staged_copy_stale
from streamops.store import ledger
from streamops.store import reconfigurations as rstore
from streamops.store.reconfigurations import Staged

log = logging.getLogger("streamops.reconfigure")
Progress = Callable[[str], None]

__all__ = ["Staged", "prestage", "release"]


def staged_path(src: Path) -> Path:
    """Where a staged copy of the checkpoint `src` goes: the stage's base name plus one
    `.staged-<ms>`. A checkpoint that is itself a staged copy (after a switch) does not add
    another suffix: the names stay bounded however many switches there are."""
    base = re.sub(r"(\.staged-\d+)+$", "", src.name)
    return src.with_name(f"{base}.staged-{int(time.time() * 1000)}")


def _repartition_copy(path: Path, partitions: int) -> None:
    """Repartition a *copy* in a short-lived Spark process: the stage's driver keeps running."""
    job = REPO_ROOT / "spark_apps" / "repartition_job.py"
    res = subprocess.run([sys.executable, str(job), str(path), str(partitions)],
                         capture_output=True, text=True, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    if res.returncode != 0:
        tail = [line for line in res.stdout.splitlines() + res.stderr.splitlines()
                if "Error" in line or "Exception" in line]
        raise RuntimeError(f"repartition of the staged copy failed: {(tail or ['see the job output'])[-1][:300]}")


def prestage(stage_ref: str, partitions: int | None = None, reg: registry.Registry | None = None,
             progress: Progress = lambda _: None, *, max_lag_batches: int = STAGED_MAX_LAG_BATCHES) -> Staged:
    """Copy the running stage's checkpoint (consistent as of its last committed batch),
    repartition the copy to `partitions`, and record it as ready. A ready copy is kept unless it
    is stale (`plan.mechanism.staged_copy_stale`) or has other partitions."""
    reg = reg or registry.load()
    app, name, st = reg.stage(stage_ref)
    sid = registry.stage_id(app, name)
    live = ledger.latest_run(sid, live=True)
    if live is None:
        raise RuntimeError(f"stage {sid} is not running: nothing to pre-stage")
    existing = rstore.staged_ready(sid)
    if existing is not None:
        stale = staged_copy_stale(existing.source, existing.as_of_batch, live.checkpoint,
                                  checkpoint.last_committed_batch(Path(live.checkpoint)), max_lag_batches)
        if stale is None and partitions in (None, existing.partitions):
            return existing
        why = stale or f"it has {existing.partitions} partitions, not {partitions}"
        log.info("stage %s: action=restage the staged copy %d is replaced: %s", sid, existing.id, why)
        progress(f"{sid}: re-staging: {why}")
        release(sid, reg)
    src = Path(live.checkpoint)
    dst = staged_path(src)
    started = time.monotonic()
    n = checkpoint.copy_live(src, dst)
    qsrc = checkpoint.quarantine_checkpoint(src)
    if checkpoint.last_committed_batch(qsrc) is not None:
        checkpoint.copy_live(qsrc, checkpoint.quarantine_checkpoint(dst))
    current = checkpoint.state_partitions(dst)
    target = partitions or current or live.state_partitions
    if current not in (None, target):  # a checkpoint with state: the query is stateful
        progress(f"{sid}: repartitioning the staged copy {current} → {target}")
        _repartition_copy(dst, target)
    staged = rstore.staged_insert(sid, str(src), str(dst), n, target)
    took = time.monotonic() - started
    log.info("stage %s: action=prestage copy of batch %d, %d partitions, in %.1fs", sid, n, target, took)
    progress(f"{sid}: pre-staged as of batch {n} with {target} partitions in {took:.1f}s")
    return staged


def release(stage_ref: str, reg: registry.Registry | None = None, status: str = "discarded") -> bool:
    """Close the stage's pre-staged copy: `discarded` (the alarm cleared; its files go) or `used`.
    Returns whether there was one."""
    reg = reg or registry.load()
    app, name, _ = reg.stage(stage_ref)
    staged = rstore.staged_ready(registry.stage_id(app, name))
    if staged is None:
        return False
    rstore.staged_close(staged.id, status)
    if status == "discarded":
        shutil.rmtree(staged.path, ignore_errors=True)
        shutil.rmtree(checkpoint.quarantine_checkpoint(Path(staged.path)), ignore_errors=True)
    return True
