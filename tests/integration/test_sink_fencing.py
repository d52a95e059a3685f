"""Fencing is a lock, not only a read (issue 44, item 5): a sink commit of run A and the admission
of run B (same stage and role) are ordered. Either A's commit sees B and is refused, or B's
admission waits for A's commit; never is A's commit accepted with B admitted before it."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from sqlalchemy import text

from demo.stages import demo_job

pytestmark = pytest.mark.db

LOCK_TIMEOUT = text("SET LOCAL lock_timeout = '5s'")  # a broken ordering fails the test, never hangs it


@pytest.fixture
def stale_run(clean_db) -> int:
    """Stage r.s, and its run A, already marked `failed` (its driver paused, found silent): its
    row is not live, so admission's lock on the live run does not touch it."""
    from streamops import registry
    from streamops.execute import stages

    reg = registry.parse({"pools": {"p": {"cores": 2}}, "apps": {"r": {
        "r_max_ms": 1000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
        "stages": {"s": {**demo_job("wordcount", {"kind": "files", "path": "r/s"}), "pool": "p",
                         "cores": {"initial": 1, "max": 2}}}}}})
    stages.sync_registry(reg)
    with clean_db.begin() as conn:
        return conn.execute(text(
            "INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, status) "
            "VALUES ('r.s', 'p', 1, 2, '{}', 'local', '/c', 'failed') RETURNING id")).scalar_one()


def _admit() -> int:
    """Run B's admission, as `streamops start` does it (A's process is gone)."""
    from streamops.store import ledger

    adm = ledger.admit("r.s", "primary", "p", 2, 1, is_alive=lambda _: False, state_partitions=2, config={},
                       launcher="local", checkpoint="/c")
    assert adm.refused is None and adm.live is None
    return adm.deployment_id


def _commit_in(conn, run: int) -> bool:
    from streamops.agent.sinks import BatchSink

    conn.execute(LOCK_TIMEOUT)
    return BatchSink("r.s", run)._commit(conn, 7, 3) is not None


def test_an_admission_during_a_sink_commit_waits_for_it(clean_db, stale_run):
    """A has checked that it is current (inside its commit transaction); B's admission starts;
    then A commits. B must not be admitted before A's COMMIT."""
    done: dict[str, float | int] = {}

    def admit() -> None:
        done["id"] = _admit()
        done["at"] = time.monotonic()

    with clean_db.connect() as conn, conn.begin():
        accepted = _commit_in(conn, stale_run)
        b = threading.Thread(target=admit, daemon=True)
        b.start()
        b.join(1.5)  # an admission not held back is done in milliseconds
        committed_at = time.monotonic()
    b.join(10)
    assert "id" in done, "B's admission finished once A committed"
    assert accepted, "A was current when it checked"
    assert done["at"] > committed_at, "B was admitted while A's commit was open: A's commit went in beside B"


def test_a_sink_commit_during_an_admission_sees_it_and_is_fenced(clean_db, stale_run, monkeypatch):
    """B's admission has inserted its row and not yet committed; A's commit starts, then B
    commits. A's commit must wait for B and be refused."""
    from streamops.store import db

    inserted, go, result = threading.Event(), threading.Event(), {}
    transaction = db.transaction

    @contextlib.contextmanager
    def held_open(*args, **kwargs):  # B's admission, with its COMMIT held back until `go`
        with transaction(*args, **kwargs) as conn:
            yield conn
            if threading.current_thread().name == "admit-b":
                inserted.set()
                go.wait(10)

    def commit_a() -> None:
        with clean_db.connect() as conn, conn.begin():
            result["accepted"] = _commit_in(conn, stale_run)

    monkeypatch.setattr(db, "transaction", held_open)
    b = threading.Thread(target=_admit, name="admit-b", daemon=True)
    b.start()
    assert inserted.wait(10)
    a = threading.Thread(target=commit_a, daemon=True)
    a.start()
    a.join(1.5)
    go.set()
    b.join(10)
    a.join(10)
    assert result == {"accepted": False}, "A's commit went in while B's admission was committing"
