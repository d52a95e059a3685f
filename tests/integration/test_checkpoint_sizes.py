"""The checkpoint's size on disk (issue 48 item 13: the taxi checkpoint grew to 728 MB in about
an hour, and nothing showed it): the supervisor measures each stage's checkpoint at most once a
minute and keeps it in checkpoint_sizes; `status --wide` shows it in a `ckpt` column and
/metrics as `streamops_checkpoint_bytes`, both read as streamops_observer, neither walking the disk."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from streamops.execute import housekeeping
from streamops.execute import supervisor as sup_mod
from streamops.paths import data_dir
from streamops.store import observe

pytestmark = pytest.mark.db


def _file(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)


@pytest.fixture
def checkpoints(clean_db):
    """Stage a.s: its latest primary run's checkpoint (1.5 MB in 3 files) and its quarantine
    query's (0.5 MB), an older run's (0.25 MB) and a rollback copy (1 MB) not yet collected.
    Stage a.t never ran: no measurement."""
    root = data_dir() / "checkpoints"
    live = root / "a.s@2"
    _file(live / "offsets" / "7", 500_000)
    _file(live / "state" / "0" / "0" / "7.zip", 500_000)
    _file(live / "state" / "0" / "0" / "SSTs" / "000009.sst", 500_000)
    _file(root / "a.s@2.quarantine" / "offsets" / "7", 500_000)
    _file(root / "a.s@1" / "offsets" / "3", 250_000)
    _file(root / "a.s@2.rollback-5" / "offsets" / "7", 1_000_000)
    with clean_db.begin() as conn:
        conn.execute(text("INSERT INTO pools (name, master, cores) VALUES ('p', 'local', 4)"))
        conn.execute(text("INSERT INTO apps (name, r_max_ms, maintenance_window, spec) VALUES ('a', 1000, '{}', '{}')"))
        for name in ("s", "t"):
            conn.execute(text("INSERT INTO stages (stage_id, app, name, job, pool, cores, min_cores, max_cores, "
                              "state_partitions, trigger_ms, spec) VALUES (:sid, 'a', :name, 'wordcount', 'p', 1, 1, "
                              "4, 4, 1000, '{}')"), {"sid": f"a.{name}", "name": name})
        for minutes, ckpt, status in ((20, root / "a.s@1", "stopped"), (10, live, "running")):
            conn.execute(text(
                "INSERT INTO deployments (stage_id, role, pool, cores, state_partitions, config, launcher, checkpoint, "
                "status, started_at) VALUES ('a.s', 'primary', 'p', 1, 4, '{}', 'local', :ckpt, :status, "
                "now() - make_interval(mins => :m))"), {"ckpt": str(ckpt), "status": status, "m": minutes})
    observe._engine.cache_clear()
    yield clean_db
    observe._engine.cache_clear()


def test_the_supervisor_measures_the_checkpoints_once_a_minute(checkpoints, monkeypatch):
    sup = sup_mod.Supervisor(registry_stub(), sup_mod.SupervisorOptions(warm_spares=False))
    walks: list[str] = []
    measure = housekeeping.measure_checkpoints
    monkeypatch.setattr(housekeeping, "measure_checkpoints",
                        lambda: walks.append(threading.current_thread().name) or measure())

    def pass_() -> None:  # a housekeeping pass, then the walk it started (in its own thread) ends
        sup._checkpoint_sizes()
        if sup._sizes_walk is not None:
            sup._sizes_walk.result(timeout=30)
    pass_()
    pass_()  # the next housekeeping pass, 5 s later: no walk
    assert len(walks) == 1
    assert walks[0].startswith("checkpoint-sizes"), "the walk ran in the supervisor's poll loop"
    with checkpoints.connect() as conn:
        rows = conn.execute(text("SELECT stage_id, bytes, disk_bytes, files FROM checkpoint_sizes")).all()
    assert [tuple(r) for r in rows] == [("a.s", 2_000_000, 3_250_000, 4)]
    monkeypatch.setattr(sup_mod, "CHECKPOINT_SIZES_EVERY_S", 0.0)
    pass_()
    assert len(walks) == 2


def registry_stub():
    from types import SimpleNamespace

    return SimpleNamespace(stage=lambda sid: None)


def test_status_wide_and_metrics_show_the_size_as_the_observer_reads_it(checkpoints, monkeypatch):
    from streamops.cli import app
    from streamops.report import prometheus

    housekeeping.record_checkpoint_sizes()
    walked = []
    monkeypatch.setattr(housekeeping, "_walk", lambda p: walked.append(p) or (0, 0))
    rows = {r.stage_id: r for r in observe.rows("stage_status")}  # streamops_observer's read
    assert rows["a.s"].checkpoint_bytes == 2_000_000 and rows["a.t"].checkpoint_bytes is None
    result = CliRunner().invoke(app, ["status", "--wide"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    header = next(ln for ln in result.output.splitlines() if "stage" in ln and "state" in ln)
    assert "ckpt" in header, header
    line = next(ln for ln in result.output.splitlines() if " a.s " in ln)
    assert "2.0 MB" in line, line
    families = {f.name: f for f in prometheus.families(prometheus.read(prometheus.start_of_utc_day()))}
    samples = families["streamops_checkpoint_bytes"].samples
    assert [(s.labels, s.value) for s in samples] == [({"app": "a", "stage": "s"}, 2_000_000.0)]
    assert walked == [], "status and /metrics read the table, never the disk"
