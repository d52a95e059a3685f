"""What a long-lived process keeps in memory stays bounded over many passes (issue 44 item 12):
the supervisor's liveness marks and its recoveries, the source log's entries, the input audit's
parsed entries; and the audit does not parse the whole compacted source log again. Pure."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

from streamops import checkpoint_layout as layout
from streamops.agent import input_watch
from streamops.agent.input_watch import InputAudit
from streamops.execute import supervisor as sup_mod
from streamops.execute import watchdog
from streamops.store import reconfigurations as rstore

PASSES = 2000


def _candidate(run: int) -> SimpleNamespace:
    return SimpleNamespace(id=run, stage_id="a.s", role="primary", app="a", status="running", pid=None)


def test_the_supervisor_keeps_marks_of_live_runs_only_and_a_bounded_list_of_recoveries(monkeypatch):
    runs = iter(range(1, 10 * PASSES))
    monkeypatch.setattr(sup_mod.gaps, "write_gap", lambda *_: None)
    monkeypatch.setattr(sup_mod.db, "now", lambda: datetime.now(UTC))  # the database's clock
    monkeypatch.setattr(sup_mod.failures, "watchdog_candidates", lambda: [_candidate(next(runs))])  # new run a pass
    monkeypatch.setattr(sup_mod.Supervisor, "_record_gaps", lambda *a: None)
    monkeypatch.setattr(watchdog, "detect", lambda *a, **k: [])  # every run alive
    sup = sup_mod.Supervisor(SimpleNamespace(stage=lambda sid: None), sup_mod.SupervisorOptions(warm_spares=False))
    for _ in range(PASSES):
        sup.poll()
    assert len(sup._seen_alive) == 1, "marks of runs no longer live are dropped"

    monkeypatch.setattr(rstore, "stage_lock", lambda sid: contextlib.nullcontext(True))
    monkeypatch.setattr(rstore, "active_stage_ids", lambda: [])
    monkeypatch.setattr(watchdog, "still_failed", lambda *a, **k: True)
    monkeypatch.setattr(watchdog, "recover",
                        lambda f, *a, **k: watchdog.Recovery(f.stage_id, 1, f.kind, "recovered", 1))
    f = watchdog.Failure("a.s", 7, "dead_pid", "gone", datetime.now(UTC))
    for _ in range(PASSES):
        sup._recover(f, "a")
    assert sup.recovered_count == PASSES and len(sup.recoveries) <= sup_mod.RECOVERIES_KEPT < PASSES
    assert sup.recoveries[-1].status == "recovered"


def _entry(path: str, batch: int) -> str:
    return json.dumps({"path": f"file:///in/{path}", "timestamp": 1, "batchId": batch})


def _spark_log(log_dir: Path, batches: int, every: int = 10) -> None:
    """A source log as Spark writes it: one entry a batch, a compaction every `every` batches
    (listing every file so far), the entries before it cleaned up."""
    log_dir.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    for b in range(batches):
        lines.append(_entry(f"f{b}.json", b))
        name = f"{b}.compact" if (b + 1) % every == 0 else str(b)
        (log_dir / name).write_text("\n".join(["v1", *(lines if name.endswith(".compact") else lines[-1:])]) + "\n")
        if name.endswith(".compact"):
            for old in range(b - 2 * every, b - every):  # Spark keeps the entries a while after compacting
                (log_dir / str(old)).unlink(missing_ok=True)


def test_the_source_log_keeps_the_entries_since_the_latest_compaction_only(tmp_path):
    ckpt = tmp_path / "ckpt"
    log = layout.SourceLog(ckpt)
    for b in range(0, 500, 10):
        _spark_log(ckpt / "sources" / "0", b + 10)
        assert log.seen() == b + 10
    assert len(log._lines) <= 11, sorted(log._lines)
    assert log.names() == {f"f{b}.json" for b in range(500)}


def test_the_input_audit_parses_only_what_is_new(tmp_path, monkeypatch):
    ckpt, inputs = tmp_path / "ckpt", tmp_path / "in"
    inputs.mkdir()
    parsed = []
    real = input_watch._parse_entry
    monkeypatch.setattr(input_watch, "_parse_entry", lambda line: parsed.append(line) or real(line))
    audit = InputAudit(inputs, ckpt, keep_batches=5)
    for b in range(0, 300, 10):
        _spark_log(ckpt / "sources" / "0", b + 10)
        parsed.clear()
        audit.check()
        assert len(parsed) <= 10 + 5 + 1, f"a compaction of {b + 10} files parsed whole ({len(parsed)} entries)"
        # results as a fresh audit's, which reads the whole log once
        fresh = InputAudit(inputs, ckpt, keep_batches=5)
        fresh.check()
        assert audit._read == fresh._read
        assert len(audit._parsed) <= 11
    parsed.clear()
    audit.check()  # nothing new: the unchanged compaction is not read again
    assert parsed == []
