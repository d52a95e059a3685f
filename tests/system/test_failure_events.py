"""The failure-events trigger (orchestrate/failure_events.py) against real PostgreSQL: a new
`failures` row becomes a TriggerEvent within seconds, older rows never fire, an unreachable
database is waited out, and the watchdog DAG is scheduled on the watched asset."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from streamops.paths import REPO_ROOT
from streamops.store import db
from tests.conftest import UNMARKED_URL

pytestmark = pytest.mark.db

# Imported when the tests run, not when pytest collects them: importing Airflow configures it from
# the environment once, and test_airflow.py's site (which runs first: this module sits beside it in
# tests/system) sets AIRFLOW_HOME only in its fixture.
failure_events = FailureEventTrigger = Watermark = None


@pytest.fixture(autouse=True)
def _airflow_imported_late():
    global failure_events, FailureEventTrigger, Watermark
    from streamops.orchestrate import failure_events as module

    failure_events, FailureEventTrigger, Watermark = module, module.FailureEventTrigger, module.Watermark

APP = "fe"
WITHIN_S = 5.0


@pytest.fixture
def stages(clean_db):
    with clean_db.begin() as conn:
        conn.execute(text("INSERT INTO pools (name, master, cores) VALUES ('p', 'local', 4)"))
        conn.execute(text("INSERT INTO apps (name, r_max_ms, maintenance_window, spec) VALUES (:a, 1000, '{}', '{}')"),
                     {"a": APP})
        for s in ("a", "b"):
            conn.execute(text(
                "INSERT INTO stages (stage_id, app, name, job, pool, cores, min_cores, max_cores, "
                "state_partitions, trigger_ms, spec) VALUES (:id, :app, :s, 'wordcount', 'p', 1, 1, 2, 2, 1000, '{}')"),
                {"id": f"{APP}.{s}", "app": APP, "s": s})
    return clean_db


def add_failure(engine, stage_id: str, status: str = "recovering") -> int:
    with engine.begin() as conn:
        return conn.execute(text(
            "INSERT INTO failures (stage_id, app, kind, detail, failed_at, status) "
            "VALUES (:sid, :app, 'dead_pid', 'test', :at, :st) RETURNING id"),
            {"sid": stage_id, "app": APP, "at": datetime.now(UTC), "st": status}).scalar_one()


class Recorder:
    """Stands in for the trigger's logger."""

    def __init__(self):
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, level):
        return lambda msg, *args, **_: self.lines.append((level, msg % args if args else msg))


def quiet_trigger(poll_s: float = 0.1) -> tuple[FailureEventTrigger, Recorder]:
    trigger = FailureEventTrigger(poll_s=poll_s)
    trigger._log = Recorder()  # LoggingMixin's cached logger
    return trigger, trigger._log


async def next_event(events, within_s: float = WITHIN_S):
    return await asyncio.wait_for(events.__anext__(), within_s)


def test_new_failures_fire_and_older_ones_do_not(stages):
    old = add_failure(stages, f"{APP}.a", status="recovered")

    async def scenario():
        trigger, log = quiet_trigger()
        events = trigger.run()
        first = asyncio.ensure_future(next_event(events))
        await asyncio.sleep(1.0)  # the trigger read its start (the newest id, `old`) and polled
        assert not first.done(), "a failure recorded before the trigger started fired"
        new = await asyncio.to_thread(add_failure, stages, f"{APP}.a")
        ev = await first
        # Two at once (a second stage, a replica of the first): one event names both.
        b = await asyncio.to_thread(add_failure, stages, f"{APP}.b")
        with stages.begin() as conn:
            c = conn.execute(text(
                "INSERT INTO failures (stage_id, app, role, kind, detail, failed_at, detected_by) "
                "VALUES (:sid, :app, 'replica-1', 'dead_pid', 'test', now(), 'supervisor') RETURNING id"),
                {"sid": f"{APP}.a", "app": APP}).scalar_one()
        ev2 = await next_event(events)
        await events.aclose()
        return old, new, ev.payload, (b, c), ev2.payload, log

    old, new, payload, (b, c), payload2, log = asyncio.run(scenario())
    assert payload["failure_ids"] == [new] and old not in payload["failure_ids"]
    assert payload["stage_ids"] == [f"{APP}.a"]
    assert payload["failures"][0]["kind"] == "dead_pid" and payload["failures"][0]["role"] == "primary"
    json.dumps(payload)  # the event is stored as JSON in the asset event's extra
    assert payload2["failure_ids"] == [b, c] and payload2["stage_ids"] == [f"{APP}.a", f"{APP}.b"]
    assert [f["detected_by"] for f in payload2["failures"]] == ["watchdog", "supervisor"]
    assert not [ln for ln in log.lines if ln[0] in ("warning", "error")], log.lines


def test_unreachable_database_is_logged_and_waited_out(stages, monkeypatch):
    good = db.database_url()

    def point_at(url: str) -> None:
        monkeypatch.setenv("STREAMOPS_DATABASE_URL", url)
        db.engine.cache_clear()

    async def scenario():
        trigger, log = quiet_trigger()
        point_at(UNMARKED_URL)  # nothing listens there
        events = trigger.run()
        pending = asyncio.ensure_future(next_event(events, within_s=30))
        await asyncio.sleep(1.5)
        assert not pending.done(), "the trigger ended while the database was unreachable"
        point_at(good)
        await asyncio.sleep(1.0)  # reachable again: it reads its start and polls
        fid = await asyncio.to_thread(add_failure, stages, f"{APP}.b")
        ev = await asyncio.wait_for(pending, WITHIN_S)
        await events.aclose()
        return fid, ev.payload, log

    try:
        fid, payload, log = asyncio.run(scenario())
    finally:
        db.engine.cache_clear()
    assert payload["failure_ids"] == [fid]
    warnings = [msg for level, msg in log.lines if level == "warning"]
    assert len(warnings) == 1 and "unreachable" in warnings[0], log.lines  # said once, not every poll
    assert any("readable again" in msg for _, msg in log.lines), log.lines


def test_a_late_commit_below_the_newest_seen_id_still_fires_once():
    mark = Watermark(start_id=10)
    assert [f["id"] for f in mark.take([{"id": 12}])] == [12]
    assert mark.after() == 10  # 11 was drawn but not committed yet: keep reading from the start
    assert [f["id"] for f in mark.take([{"id": 11}, {"id": 12}])] == [11]
    assert mark.take([{"id": 11}, {"id": 12}]) == []
    assert mark.take([{"id": 9}]) == []  # before the trigger started


def test_trigger_round_trips_and_the_watchdog_is_scheduled_on_its_asset():
    from airflow._shared.module_loading import import_string  # what the triggerer uses
    from airflow.sdk import AssetOrTimeSchedule
    from airflow.triggers.base import BaseEventTrigger

    classpath, kwargs = FailureEventTrigger(poll_s=0.5).serialize()
    again = import_string(classpath)(**kwargs)
    assert isinstance(again, BaseEventTrigger) and again.serialize() == (classpath, kwargs)
    # Airflow identifies an asset trigger by classpath and kwargs: two parses give the same trigger.
    assert BaseEventTrigger.hash(*FailureEventTrigger().serialize()) == BaseEventTrigger.hash(
        *FailureEventTrigger().serialize())

    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO_ROOT / "dags" / "streamops_watchdog.py"))
    assert bag.import_errors == {}
    dag = bag.dags["streamops_watchdog"]
    tt = dag.timetable
    assert isinstance(tt, AssetOrTimeSchedule)
    asset = tt.asset_condition
    assert asset.name == failure_events.ASSET_NAME
    assert [type(w.trigger) for w in asset.watchers] == [FailureEventTrigger]
    assert tt.timetable.delta.total_seconds() == 60
