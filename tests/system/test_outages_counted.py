"""Two outages that kill nothing, made with the real fault (issue 48, item 5): PostgreSQL stalled
(every server process SIGSTOPped) for 45 s, and the checkpoint's disk full for 90 s. The live
run before this test counted neither. Now neither loses or doubles a row. Each one is downtime:
one `output_gap` failure names the cause and is closed at the next commit, and its downtime is
the one `reporting.downtime_daily` counts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import psutil
import pytest
from sqlalchemy import text

from demo import oracles
from streamops import generator, registry
from streamops.execute import stages, supervisor
from streamops.store import db
from tests.integration.test_e2e_stage import eventually
from tests.integration.test_reconfigure import Feeder
from tests.system.test_chaos import _registry, private_database  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.db, pytest.mark.chaos, pytest.mark.slow]

SID = "chaos.s"


@pytest.fixture(autouse=True)
def _fresh_checkpoints():
    for ckpt in registry.resolve_path("checkpoints").glob("chaos.s*"):
        if not os.path.ismount(ckpt):
            shutil.rmtree(ckpt)


def _one(sql: str, **params):
    with db.engine().connect() as conn:
        return conn.execute(text(sql), params).one_or_none()


def _commits() -> int:
    return _one("SELECT count(*) FROM sink_commits WHERE stage_id = :s AND rows > 0", s=SID)[0]


def _last_commit() -> datetime:
    return _one("SELECT max(committed_at) FROM sink_commits WHERE stage_id = :s", s=SID)[0]


def _the_gap_counted(cause: str, since: datetime):
    """The one failure of the stage after `since`, once closed: an output gap naming `cause`,
    and downtime_daily's failure seconds for the app, which must be its downtime."""
    eventually(lambda: _one("SELECT count(*) FROM failures WHERE stage_id = :s AND status <> 'recovering' "
                            "AND detected_at >= :t", s=SID, t=since)[0] >= 1, 180, "the gap's failure closed")
    with db.engine().connect() as conn:
        rows = conn.execute(text("SELECT kind, status, detail, failed_at, detected_at, recovered_at, downtime_ms "
                                 "FROM failures WHERE stage_id = :s AND detected_at >= :t ORDER BY id"),
                            {"s": SID, "t": since}).all()
        counted = conn.execute(text("SELECT coalesce(sum(downtime_failure_s), 0) FROM reporting.downtime_daily "
                                    "WHERE day >= current_date - 1 AND app = 'chaos'")).scalar_one()
    assert [(r.kind, r.status) for r in rows] == [("output_gap", "recovered")], rows
    assert rows[0].detail.startswith(f"cause={cause}"), rows[0].detail
    assert float(counted) == pytest.approx(rows[0].downtime_ms / 1000, abs=0.01), "the report counts the gap"
    return rows[0]


def _through(outage, feeder: Feeder, cause: str, since: datetime):
    """`outage()` (it returns when the fault is over) after three commits; then the first commit
    after it, the sink equal to the ground truth once the feed stops, and the gap the report
    counts. Returns (the gap's failure row, seconds from the fault's end to the first commit)."""
    eventually(lambda: _commits() >= 3, 120, "three commits")
    last = _last_commit()
    outage()
    over = time.monotonic()
    eventually(lambda: _last_commit() > last, 180, "a commit after the fault")
    first_commit_s = time.monotonic() - over
    feeder.__exit__()
    want = oracles.expected("wordcount", generator.read_valid_records(feeder.out))
    eventually(lambda: oracles.actual(db.engine(), SID, "wordcount") == want, 240, "the sink to equal the ground truth")
    return _the_gap_counted(cause, since), first_commit_s


def _server_processes(cluster) -> list[psutil.Process]:
    postmaster = psutil.Process(int(Path(cluster.datadir, "postmaster.pid").read_text().split()[0]))
    return [postmaster, *postmaster.children(recursive=True)]


@contextlib.contextmanager
def _stalled(procs: list[psutil.Process]):
    """Every server process stopped: connections stay open, and nothing answers."""
    for p in procs:
        p.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(signal.SIGCONT)


def test_a_45s_database_stall_restarts_nothing_and_the_report_counts_it(private_database):  # noqa: F811
    reg = _registry()
    before = datetime.now().astimezone()
    with Feeder("chaos/in", seed=31, rate=100) as feeder:
        run = stages.start_stage(SID, reg)
        sup, stop, thread = supervisor.start_in_thread(reg, supervisor.SupervisorOptions(wait_s=90,
                                                                                         warm_spares=False))
        try:
            def stall() -> None:
                with _stalled(_server_processes(private_database)):
                    time.sleep(45)

            gap, first_commit_s = _through(stall, feeder, "database_unavailable", before)
            print(f"database stall 45 s: detected {(gap.detected_at - gap.failed_at).total_seconds():.1f}s after "
                  f"the last commit before it, first commit {first_commit_s:.1f}s after the stall ended, output "
                  f"gap counted {gap.downtime_ms / 1000:.1f}s")
            assert 45 <= gap.downtime_ms / 1000 < 45 + 60, "the gap is the stall, and the stall ends it"
            assert _one("SELECT count(*) FROM deployments WHERE stage_id = :s", s=SID)[0] == 1, "a restart"
            assert _one("SELECT status FROM deployments WHERE id = :i", i=run.deployment_id)[0] == "running"
        finally:
            stop.set()
            thread.join(60)
    stages.stop_stage(SID, reg, deadline_s=30)


@contextlib.contextmanager
def _small_disk(path: Path, size_mb: int = 64):
    """A tmpfs of `size_mb` mounted at `path`: a disk this test can fill."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=False)  # a JVM still holds a file
        shutil.rmtree(path, ignore_errors=True)


def _fill(path: Path) -> Path:
    """Every free byte of `path`'s filesystem taken by one file."""
    filler = path / "filler"
    with open(filler, "wb", buffering=0) as f:
        for chunk in (1 << 20, 4096, 1):
            with contextlib.suppress(OSError):  # ENOSPC: on with a smaller chunk
                while True:
                    f.write(b"\0" * chunk)
    return filler


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs to fill needs root (CI runs as root)")
def test_a_full_checkpoint_disk_for_90s_loses_nothing_and_the_report_counts_it(clean_db):
    reg = _registry()
    before = datetime.now().astimezone()
    ckpt = Path(stages.checkpoint_for(SID))
    with _small_disk(ckpt), Feeder("chaos/in", seed=32, rate=100) as feeder:
        sup, stop, thread = supervisor.start_in_thread(reg, supervisor.SupervisorOptions(wait_s=90,
                                                                                         warm_spares=False))
        try:
            stages.start_stage(SID, reg)
            def full_for_90s() -> None:
                filler = _fill(ckpt)
                time.sleep(90)
                filler.unlink()

            gap, first_commit_s = _through(full_for_90s, feeder, "disk_full", before)
            restarts = _one("SELECT count(*) FROM deployments WHERE stage_id = :s", s=SID)[0] - 1
            print(f"checkpoint disk full 90 s: detected {(gap.detected_at - gap.failed_at).total_seconds():.1f}s "
                  f"after the last commit before it, first commit {first_commit_s:.1f}s after the disk was "
                  f"freed, output gap counted {gap.downtime_ms / 1000:.1f}s, {restarts} restart(s)")
            assert 90 <= gap.downtime_ms / 1000 < 90 + 90
            assert _one("SELECT health FROM stages WHERE stage_id = :s", s=SID)[0] == "ok", "given up"
        finally:
            stop.set()
            thread.join(60)
            stages.stop_stage(SID, reg, deadline_s=30)
