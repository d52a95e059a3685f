"""The `reporting` schema (sql/reports/) against real PostgreSQL: exact figures from hand-built
rows, the day edge cases, the reader role, and stage_metrics retention."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from sqlalchemy import create_engine, text

from streamops.report import retention
from streamops.store import db, migrate
from tests.conftest import drop_database, recreate_database

pytestmark = pytest.mark.db

D = date(2024, 3, 10)  # a past day: observed all of it
T0 = datetime(2024, 3, 10, tzinfo=UTC)
FULL_DAY = 86400.0


def at(seconds: float, day: date = D) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(seconds=seconds)


@pytest.fixture
def rdb(clean_db):
    """Reporting days are session-TimeZone days: conftest pins PGTZ=UTC for the fixtures' arithmetic."""
    with clean_db.begin() as conn:
        assert conn.execute(text("SHOW TimeZone")).scalar_one() == "UTC"
    with clean_db.begin() as conn:
        conn.execute(text("INSERT INTO pools (name, master, cores) VALUES ('p', 'local', 8)"))
    return clean_db


def add_app(engine, name: str, r_max_ms: int = 1000, created_at: datetime = T0 - timedelta(days=30),
            stages: dict[str, int] | None = None, in_service: bool = True) -> None:
    """An app and its stages ({stage name: trigger ms}); in service: each stage has had one run
    of 1 core since registration, still live. Without, the test adds the runs itself."""
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO apps (name, r_max_ms, maintenance_window, spec, created_at) "
                          "VALUES (:n, :r, '{}', '{}', :c)"), {"n": name, "r": r_max_ms, "c": created_at})
        for s, trig in (stages or {"s": 1000}).items():
            conn.execute(text(
                "INSERT INTO stages (stage_id, app, name, job, pool, cores, min_cores, max_cores, "
                "state_partitions, trigger_ms, spec) VALUES (:id, :app, :s, 'wordcount', 'p', 1, 1, 4, 2, :t, '{}')"),
                {"id": f"{name}.{s}", "app": name, "s": s, "t": trig})
    if in_service:
        for s in stages or {"s": 1000}:
            add_run(engine, f"{name}.{s}", 1, created_at, None, status="running")


def add_batches(engine, stage_id: str, rows: list[tuple[datetime, float, float | None]], trigger_ms: int = 1000,
                deployment_id: int | None = None, cores: int = 1) -> None:
    """Batches (start, p95, p50) of run `deployment_id` (None: a row without one); p50 None means
    p95 − 450 (so the interpolated p90 is p95 − 50)."""
    with engine.begin() as conn:
        for i, (ts, p95, p50) in enumerate(rows):
            conn.execute(text(
                "INSERT INTO stage_metrics (ts, stage_id, deployment_id, run_id, batch_id, input_rows, "
                "batch_duration_ms, trigger_interval_ms, latency_p50_ms, latency_p95_ms, latency_max_ms, cores) "
                "VALUES (:ts, :sid, :dep, 'r1', :b, 10, 300, :trig, :p50, :p95, :p95, :cores)"),
                {"ts": ts, "sid": stage_id, "dep": deployment_id, "b": i, "trig": trigger_ms, "p95": p95,
                 "p50": p95 - 450 if p50 is None else p50, "cores": cores})


def add_reconfiguration(engine, stage_id: str, app: str, first_output: datetime, downtime_ms: float, **kw) -> int:
    cols = {"stage_id": stage_id, "app": app, "action": "scale_out", "mechanism": "pause_resume", "status": "done",
            "requested_by": "policy:edf", "requested_at": first_output - timedelta(seconds=30),
            "first_batch_done_at": first_output, "finished_at": first_output + timedelta(seconds=1),
            "outcome": "done", "downtime_ms": downtime_ms, "from_cores": 1, "target_cores": 2, **kw}
    with engine.begin() as conn:
        return conn.execute(text(f"INSERT INTO reconfigurations ({', '.join(cols)}) "
                                 f"VALUES ({', '.join(':' + c for c in cols)}) RETURNING id"), cols).scalar_one()


def add_failure(engine, stage_id: str, app: str, failed_at: datetime, recovered_at: datetime | None,
                last_commit_at: datetime | None = None, downtime_ms: float | None = None, mttr_ms: float | None = None):
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO failures (stage_id, app, kind, detail, failed_at, last_commit_at, detected_at, status, "
            "recovered_at, closed_at, mttr_ms, downtime_ms) VALUES (:sid, :app, 'dead_pid', 'test', :f, :lc, :f, "
            ":st, :rec, :rec, :mttr, :down)"),
            {"sid": stage_id, "app": app, "f": failed_at, "lc": last_commit_at or failed_at,
             "st": "recovered" if recovered_at else "recovering", "rec": recovered_at, "mttr": mttr_ms,
             "down": downtime_ms})


def add_run(engine, stage_id: str, cores: int, start: datetime, stop: datetime | None, status: str = "stopped",
            role: str = "primary", run_id: int | None = None) -> int:
    """A run (deployments row) of `role`; `run_id` forces its id."""
    with engine.begin() as conn:
        return conn.execute(text(
            "INSERT INTO deployments (id, stage_id, role, pool, cores, state_partitions, config, launcher, checkpoint, "
            "status, started_at, running_at, stopped_at) VALUES (COALESCE(CAST(:id AS bigint), "
            "nextval(pg_get_serial_sequence('deployments', 'id'))), :sid, :role, 'p', :c, 2, '{}', 'local', '/x', :st, "
            ":a, :a, :b) RETURNING id"),
            {"id": run_id, "sid": stage_id, "role": role, "c": cores, "st": status, "a": start, "b": stop}).scalar_one()


def view(engine, name: str, day: date = D, app: str | None = None) -> list[dict]:
    with engine.begin() as conn:
        rows = conn.execute(text(f"SELECT * FROM reporting.{name} WHERE day = :d ORDER BY app"), {"d": day})
        out = [dict(r._mapping) for r in rows]
    return [r for r in out if app is None or r["app"] == app]


def one(engine, name: str, app: str, day: date = D) -> dict:
    rows = view(engine, name, day, app)
    assert len(rows) == 1, rows
    return rows[0]


# -- downtime -------------------------------------------------------------------------------------
def test_two_reconfigurations_and_a_failure_give_availability_and_mttr(rdb):
    add_app(rdb, "a", stages={"s": 1000, "t": 1000})
    add_reconfiguration(rdb, "a.s", "a", at(3600), 4000)
    add_reconfiguration(rdb, "a.t", "a", at(7200), 6000)
    add_failure(rdb, "a.s", "a", failed_at=at(40000), last_commit_at=at(40000), recovered_at=at(40020),
                downtime_ms=20000, mttr_ms=20000)
    r = one(rdb, "downtime_daily", "a")
    assert r["observed_s"] == FULL_DAY
    assert r["downtime_reconfig_s"] == pytest.approx(10.0)
    assert r["downtime_failure_s"] == pytest.approx(20.0)
    assert r["downtime_s"] == pytest.approx(30.0)
    assert r["availability"] == pytest.approx(1 - 30 / 86400)
    assert (r["reconfigurations"], r["failures"], r["failures_recovered"]) == (2, 1, 1)
    assert r["mttr_s"] == pytest.approx(20.0)


def test_overlapping_gaps_count_once(rdb):
    """Two stages down at the same time: the app's output was down once, not twice."""
    add_app(rdb, "a", stages={"s": 1000, "t": 1000})
    add_reconfiguration(rdb, "a.s", "a", at(1010), 10000)          # 1000 → 1010
    add_failure(rdb, "a.t", "a", failed_at=at(1005), recovered_at=at(1015), downtime_ms=10000)  # 1005 → 1015
    r = one(rdb, "downtime_daily", "a")
    assert (r["downtime_reconfig_s"], r["downtime_failure_s"]) == (pytest.approx(10.0), pytest.approx(10.0))
    assert r["downtime_s"] == pytest.approx(15.0)


def test_downtime_across_midnight_is_split_between_both_days(rdb):
    add_app(rdb, "a")
    nxt = D + timedelta(days=1)
    # failure 23:59:50 → 00:00:20 (30 s: 10 s today, 20 s tomorrow); reconfiguration gap 23:59:58 → 00:00:03
    add_failure(rdb, "a.s", "a", failed_at=at(86390), last_commit_at=at(86390), recovered_at=at(20, nxt),
                downtime_ms=30000, mttr_ms=30000)
    add_reconfiguration(rdb, "a.s", "a", at(3, nxt), 5000, requested_at=at(86000))
    today, tomorrow = one(rdb, "downtime_daily", "a"), one(rdb, "downtime_daily", "a", nxt)
    assert today["downtime_failure_s"] == pytest.approx(10.0)
    assert tomorrow["downtime_failure_s"] == pytest.approx(20.0)
    assert today["downtime_reconfig_s"] == pytest.approx(2.0)
    assert tomorrow["downtime_reconfig_s"] == pytest.approx(3.0)
    # the gaps overlap from 23:59:58 on: the union, per day
    assert today["downtime_s"] == pytest.approx(10.0)
    assert tomorrow["downtime_s"] == pytest.approx(20.0)
    # a failure and a reconfiguration belong to the day they started
    assert (today["failures"], tomorrow["failures"]) == (1, 0)
    assert (today["reconfigurations"], tomorrow["reconfigurations"]) == (1, 0)
    assert today["mttr_s"] == pytest.approx(30.0) and tomorrow["mttr_s"] is None


def test_unrecovered_failure_is_down_until_now(rdb):
    add_app(rdb, "a", created_at=datetime.now(UTC) - timedelta(days=2))
    failed = datetime.now(UTC) - timedelta(hours=30)
    add_failure(rdb, "a.s", "a", failed_at=failed, recovered_at=None)
    with rdb.begin() as conn:
        today = conn.execute(text("SELECT current_date")).scalar_one()
    r = one(rdb, "downtime_daily", "a", today)
    assert r["downtime_failure_s"] == pytest.approx(r["observed_s"], abs=5)
    assert r["availability"] == pytest.approx(0.0, abs=1e-3)


# -- SLA --------------------------------------------------------------------------------------------
# p95 per second; p90 = p95 − 50; R_max = 1000 ms
LATENCIES = [500, 800, 1200, 900, 1500, 1040, 600, 2000, 400, 300]


def test_known_latencies_give_known_windows_and_percentiles(rdb):
    add_app(rdb, "a", r_max_ms=1000)
    add_batches(rdb, "a.s", [(at(43200 + i + 0.25), p95, None) for i, p95 in enumerate(LATENCIES)])
    r = one(rdb, "sla_daily", "a")
    assert r["observed_s"] == FULL_DAY
    assert r["measured_s"] == 10
    assert r["seconds_within_rmax"] == 6                     # 500 800 900 600 400 300
    assert r["share_within_rmax"] == pytest.approx(6 / 86400)
    assert (r["batches"], r["batches_within_slo"]) == (10, 6)
    assert r["share_batches_within_slo"] == pytest.approx(0.6)
    assert r["violated_windows"] == 3                        # p90 above 1000: 1150 1450 1950 (not 990)
    assert r["response_p50_ms"] == pytest.approx(850.0)      # continuous percentiles of the 10 windows
    assert r["response_p95_ms"] == pytest.approx(1775.0)
    assert r["response_p99_ms"] == pytest.approx(1955.0)


def test_response_sums_the_stages_and_a_slower_trigger_holds_its_value(rdb):
    """Stage a every 1 s, stage b every 2 s: b's batch speaks for two windows. A window counts only
    when both stages have a batch speaking for it."""
    add_app(rdb, "c", r_max_ms=1000, stages={"a": 1000, "b": 2000})
    base = 7200
    add_batches(rdb, "c.a", [(at(base + i + 0.1), p, None) for i, p in enumerate([300, 300, 700, 300, 300])])
    add_batches(rdb, "c.b", [(at(base + 0.5), 400, None), (at(base + 2.5), 500, None)], trigger_ms=2000)
    r = one(rdb, "sla_daily", "c")
    # windows: 700, 700, 1200, 800; the 5th has stage a only (b stopped): not measured
    assert r["measured_s"] == 4
    assert r["seconds_within_rmax"] == 3
    assert r["batches"] == 7
    assert r["violated_windows"] == 1                        # p90 sums: 600 600 1100 700
    assert r["response_p50_ms"] == pytest.approx(750.0)


# a stage `a` with two runs (the primary P, and replica-1 R, faster in some windows) beside a stage
# `b` of one run at 100 ms, from 43 200 s; R alone in the 11th window (P had stopped writing).
P_A = [800, 900, 1200, 1500, 700, 2000, 600, 1100, 950, 1020]
R_A = [600, 1300, 1000, 1400, 900, 1800, 650, 400, 990, 1060, 300]


def replicated_app(engine, run_ids: tuple[int | None, int | None] = (None, None)) -> None:
    """App `h` (R_max 1 s) as above, its runs holding 2, 2 and 1 cores; `run_ids` forces P's and R's ids."""
    add_app(engine, "h", r_max_ms=1000, stages={"a": 1000, "b": 1000}, in_service=False)
    p = add_run(engine, "h.a", 2, at(-3600), None, status="running", run_id=run_ids[0])
    r = add_run(engine, "h.a", 2, at(-3600), None, status="running", role="replica-1", run_id=run_ids[1])
    b = add_run(engine, "h.b", 1, at(-3600), None, status="running")
    add_batches(engine, "h.a", [(at(43200 + i + 0.25), v, None) for i, v in enumerate(P_A)], deployment_id=p, cores=2)
    # 0.4 s after P's: a batch of a trigger of 1 s or more speaks from the window nearest its start
    # (reporting.first_window), so both runs' batch i speak for window i
    add_batches(engine, "h.a", [(at(43200 + i + 0.4), v, None) for i, v in enumerate(R_A)], deployment_id=r, cores=2)
    add_batches(engine, "h.b", [(at(43200 + i + 0.1), 100, None) for i in range(len(R_A))], deployment_id=b)


# deployment ids 1000 and 1064 share a bit of sla_for_day's run mask: the same figures, by its exact path
@pytest.mark.parametrize("run_ids", [(None, None), (1000, 1064)])
def test_a_stage_with_replicas_counts_with_its_fastest_run(rdb, run_ids):
    """Per window, stage a's response is its faster run's, not the sum of both runs' (which would
    be 1 400 + 100 ms in the first window): min(P, R) + 100 = 700 1000 1100 1500 800 1900 700 500
    1050 1120 400."""
    replicated_app(rdb, run_ids)
    r = one(rdb, "sla_daily", "h")
    assert r["measured_s"] == 11
    assert r["seconds_within_rmax"] == 6                     # 700 1000 800 700 500 400
    assert r["violated_windows"] == 3                        # p90 = min(P, R) − 50 + 50: 1400 1800 1020
    assert (r["batches"], r["batches_within_slo"]) == (10 + 11 + 11, 5 + 7 + 11)    # every run's batches
    assert r["response_p50_ms"] == pytest.approx(1000.0)
    assert r["response_p95_ms"] == pytest.approx(1700.0)
    assert r["response_p99_ms"] == pytest.approx(1860.0)


def test_several_batches_of_each_replica_in_a_window_count_with_the_runs_means(rdb):
    """A 500 ms trigger: each run has two batches per window. A run counts with its mean, and the
    stage with its faster run's mean: window 100 P (3 000, 500) → 1 750 against R (1 000, 1 000) →
    1 000; window 101 P 500 against R 1 000; window 102 R alone, 700."""
    add_app(rdb, "m", r_max_ms=1000, stages={"s": 500}, in_service=False)
    p = add_run(rdb, "m.s", 1, at(-3600), None, status="running")
    r = add_run(rdb, "m.s", 1, at(-3600), None, status="running", role="replica-1")
    add_batches(rdb, "m.s", [(at(100.1), 3000, None), (at(100.6), 500, None), (at(101.1), 500, None),
                             (at(101.6), 500, None)], trigger_ms=500, deployment_id=p)
    add_batches(rdb, "m.s", [(at(100.2), 1000, None), (at(100.7), 1000, None), (at(101.2), 1000, None),
                             (at(101.7), 1000, None), (at(102.2), 700, None), (at(102.7), 700, None)],
                trigger_ms=500, deployment_id=r)
    s = one(rdb, "sla_daily", "m")
    assert (s["measured_s"], s["seconds_within_rmax"], s["violated_windows"]) == (3, 3, 0)
    assert s["response_p50_ms"] == pytest.approx(700.0)
    assert s["response_p99_ms"] == pytest.approx(700 + 0.98 * 300)
    assert s["batches"] == 10


def test_empty_day(rdb):
    add_app(rdb, "a")
    s, d, c = one(rdb, "sla_daily", "a"), one(rdb, "downtime_daily", "a"), one(rdb, "cost_daily", "a")
    assert s["observed_s"] == FULL_DAY and s["measured_s"] == 0 and s["batches"] == 0
    assert s["seconds_within_rmax"] == 0 and s["violated_windows"] == 0
    assert s["share_batches_within_slo"] is None and s["response_p95_ms"] is None
    assert d["downtime_s"] == 0 and d["availability"] == 1.0 and d["failures"] == 0 and d["mttr_s"] is None
    assert c["core_hours"] == pytest.approx(24.0) and c["runs"] == 1, "its run held a core all day"
    assert view(rdb, "reconfigurations") == []
    # before any app was registered there is nothing to report
    for v in ("sla_daily", "downtime_daily", "cost_daily"):
        assert view(rdb, v, D - timedelta(days=365)) == []


def test_app_registered_mid_day_is_observed_from_registration(rdb):
    add_app(rdb, "a", r_max_ms=1000, created_at=at(43200), in_service=False)
    # a leftover batch from before registration does not count
    add_batches(rdb, "a.s", [(at(40000), 5000, None), (at(50000), 500, None), (at(50001), 1500, None)])
    add_failure(rdb, "a.s", "a", failed_at=at(60000), recovered_at=at(60010), downtime_ms=10000, mttr_ms=10000)
    add_run(rdb, "a.s", 2, at(43200), at(43200 + 3600))
    add_run(rdb, "a.s", 1, at(43200 + 3600), None, status="running")
    s, d = one(rdb, "sla_daily", "a"), one(rdb, "downtime_daily", "a")
    assert s["observed_s"] == d["observed_s"] == 43200.0
    assert (s["batches"], s["measured_s"], s["seconds_within_rmax"]) == (2, 2, 1)
    assert s["share_within_rmax"] == pytest.approx(1 / 43200)
    assert d["availability"] == pytest.approx(1 - 10 / 43200)
    assert one(rdb, "cost_daily", "a")["core_hours"] == pytest.approx(2.0 + 11.0)
    assert view(rdb, "sla_daily", D - timedelta(days=1)) == []


def test_time_after_an_operator_stopped_the_app_is_not_observed(rdb):
    """Both stages stopped 10:00 → 14:00 by an operator: those 4 hours are not charged to the SLO.
    The gap inside a reconfiguration is (it is downtime), and so is a run never stopped (live, or
    lost while nothing watched: unmeasured, not within R_max)."""
    add_app(rdb, "a", r_max_ms=1000, in_service=False, stages={"s": 1000, "t": 1000})
    add_run(rdb, "a.s", 1, at(-3600), at(36000))                       # stopped at 10:00
    add_run(rdb, "a.t", 1, at(-3600), at(36000))
    add_run(rdb, "a.s", 1, at(50400), at(52210))                       # 14:00, stopped by a reconfiguration
    add_reconfiguration(rdb, "a.s", "a", at(52250), 5000, requested_at=at(52200))
    add_run(rdb, "a.s", 2, at(52245), None, status="running")          # never stopped
    add_run(rdb, "a.t", 1, at(50400), at(80000))                       # a.s still runs after this stop
    add_batches(rdb, "a.s", [(at(50400 + k), 500, None) for k in range(10)])
    observed = FULL_DAY - 4 * 3600
    s, d = one(rdb, "sla_daily", "a"), one(rdb, "downtime_daily", "a")
    assert s["observed_s"] == d["observed_s"] == pytest.approx(observed)
    assert d["downtime_s"] == pytest.approx(5.0) and d["availability"] == pytest.approx(1 - 5 / observed)
    assert (s["measured_s"], s["seconds_within_rmax"]) == (10, 10)
    assert s["share_within_rmax"] == pytest.approx(10 / observed)
    # an app with no run that day is not in the day's rows
    add_app(rdb, "idle", in_service=False)
    assert view(rdb, "sla_daily", app="idle") == view(rdb, "downtime_daily", app="idle") == []


# -- cost, reconfigurations -------------------------------------------------------------------------
def test_core_hours_split_at_midnight(rdb):
    add_app(rdb, "a", in_service=False)
    add_run(rdb, "a.s", 2, at(22 * 3600), at(26 * 3600))                          # 22:00 → 02:00, 2 cores
    add_run(rdb, "a.s", 4, at(10 * 3600), at(10 * 3600 + 1800))                    # 30 min at 4 cores
    add_run(rdb, "a.s", 8, at(11 * 3600), None, status="refused")                 # never held cores
    assert one(rdb, "cost_daily", "a")["core_hours"] == pytest.approx(4.0 + 2.0)
    nxt = one(rdb, "cost_daily", "a", D + timedelta(days=1))
    assert nxt["core_hours"] == pytest.approx(4.0) and nxt["runs"] == 1 and nxt["max_cores"] == 2


def test_core_hours_follow_live_scaling_within_one_run(rdb):
    """A run on a cluster whose cores changed live (deployment_scaling) is charged what it held
    at each moment: 1 core 00:00-01:00, 3 cores 01:00-02:00, 2 cores 02:00-03:00."""
    add_app(rdb, "a", in_service=False)
    run = add_run(rdb, "a.s", 2, at(0), at(3 * 3600))
    with rdb.begin() as conn:
        for frm, to, t in ((1, 3, 3600), (3, 2, 2 * 3600)):
            conn.execute(text("INSERT INTO deployment_scaling (deployment_id, from_cores, to_cores, at) "
                              "VALUES (:d, :f, :t, :at)"), {"d": run, "f": frm, "t": to, "at": at(t)})
    c = one(rdb, "cost_daily", "a")
    assert c["core_hours"] == pytest.approx(1.0 + 3.0 + 2.0) and c["runs"] == 1 and c["max_cores"] == 3


def test_reconfigurations_view_says_who_asked_and_what_was_decided(rdb):
    add_app(rdb, "a")
    with rdb.begin() as conn:
        req = conn.execute(text(
            "INSERT INTO requests (stage_id, app, action, target_cores, gain, cost_ms, reason, policy, status) "
            "VALUES ('a.s', 'a', 'scale_out', 2, 0.4, 5000, 'busy 0.93 > 0.8', 'edf', 'granted') "
            "RETURNING id")).scalar_one()
        dec = conn.execute(text(
            "INSERT INTO decisions (app, request_id, stage_id, action, outcome, reason, policy, decided_by) "
            "VALUES ('a', :r, 'a.s', 'scale_out', 'granted', 'token available', 'token_bucket', 'replan') "
            "RETURNING id"),
            {"r": req}).scalar_one()
    rid = add_reconfiguration(rdb, "a.s", "a", at(5000), 4000, request_id=req, decision_id=dec)
    add_reconfiguration(rdb, "a.s", "a", at(9000), 0, requested_by="user:alice", status="rolled_back",
                        outcome="rolled back", rollback_reason="no commit within 120 s")
    rows = view(rdb, "reconfigurations")
    assert [r["requested_by_kind"] for r in rows] == ["policy", "user"]
    r = next(x for x in rows if x["id"] == rid)
    assert (r["requested_by_name"], r["request_policy"], r["request_reason"]) == ("edf", "edf", "busy 0.93 > 0.8")
    assert (r["decision_outcome"], r["decision_reason"], r["decided_by"]) == ("granted", "token available", "replan")
    assert r["downtime_s"] == pytest.approx(4.0) and r["first_batch_done_at"] == at(5000)
    u = next(x for x in rows if x["id"] != rid)
    assert (u["requested_by_name"], u["status"], u["rollback_reason"]) == \
        ("alice", "rolled_back", "no commit within 120 s")


# -- the design: a filter on day computes that day only ----------------------------------------------
def test_filter_on_day_calls_the_per_day_function_once(rdb):
    add_app(rdb, "a", created_at=T0 - timedelta(days=400))
    with rdb.begin() as conn:
        plan = "\n".join(conn.execute(text(
            "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) SELECT * FROM reporting.sla_daily WHERE day = :d"),
            {"d": D}).scalars())
    fn = [line for line in plan.splitlines() if "sla_for_day" in line]
    assert fn and "loops=1)" in fn[0], plan
    # and the function agrees with the view
    with rdb.begin() as conn:
        direct = conn.execute(text("SELECT * FROM reporting.sla_for_day(:d)"), {"d": D}).mappings().all()
    assert [dict(r) for r in direct] == view(rdb, "sla_daily")


# -- the reader role ----------------------------------------------------------------------------------
def _as_reader(engine, sql: str):
    with engine.connect() as conn:
        conn.execute(text("SET ROLE streamops_reader"))
        try:
            return conn.execute(text(sql)).all()
        finally:
            conn.rollback()


def test_reader_selects_reporting_and_nothing_else(rdb):
    add_app(rdb, "a")
    add_reconfiguration(rdb, "a.s", "a", at(100), 1000)
    for v in ("sla_daily", "downtime_daily", "cost_daily", "reconfigurations"):
        _as_reader(rdb, f"SELECT * FROM reporting.{v} WHERE day = '{D}'")
    assert len(_as_reader(rdb, f"SELECT * FROM reporting.sla_for_day('{D}')")) == 1
    for raw in ("reconfigurations", "requests", "decisions", "stage_metrics", "apps", "failures", "deployments"):
        with pytest.raises(Exception, match="permission denied"):
            _as_reader(rdb, f"SELECT * FROM public.{raw} LIMIT 1")
    for write in ("INSERT INTO public.pools (name, master, cores) VALUES ('x', 'local', 1)",
                  "DELETE FROM public.reconfigurations",
                  "CREATE TABLE reporting.mine (x int)",
                  "CREATE TABLE public.mine (x int)",
                  "DELETE FROM reporting.reconfigurations",
                  "SELECT stage_metrics_retention(1)"):
        with pytest.raises(Exception, match="permission denied|cannot delete"):
            _as_reader(rdb, write)


def test_reader_runs_the_readmes_example_on_the_workloads_outputs(rdb):
    """The README tells analysts to query the top-10 routes as streamops_reader: that works, and
    the other output views too, while the raw sink table stays refused."""
    import re

    from streamops.paths import REPO_ROOT

    add_app(rdb, "a")
    with rdb.begin() as conn:
        for i, route in enumerate(["1.1>2.2", "3.3>4.4"]):
            conn.execute(text(
                "INSERT INTO sink_outputs (stage_id, key, value, version, batch_id) VALUES ('a.s', :k, "
                "CAST(:v AS jsonb), :n, 0)"), {"k": f"w|{route}", "n": 5 - i, "v": __import__("json").dumps(
                    {"window_start": "2026-11-21T12:00:00Z", "window_end": "2026-11-21T12:30:00Z", "route": route,
                     "count": 5 - i})})
    from streamops import registry
    from streamops.store import ledger

    ledger.sync_views(registry.load(REPO_ROOT / "apps.yaml").views)  # the demo registry's own view
    example = re.search(r"`(SELECT \* FROM reporting\.taxi_top10_routes[^`]*)`", (REPO_ROOT / "README.md").read_text())
    assert example, "the README shows the analyst's example query"
    rows = _as_reader(rdb, example.group(1))
    assert [(r.rank, r.route, r.trips) for r in rows] == [(1, "1.1>2.2", 5), (2, "3.3>4.4", 4)]
    assert len(_as_reader(rdb, "SELECT * FROM reporting.stage_outputs WHERE stage_id = 'a.s'")) == 2
    _as_reader(rdb, "SELECT reason_kind, count(*) FROM reporting.quarantine GROUP BY 1")
    for raw in ("sink_outputs", "quarantine"):
        with pytest.raises(Exception, match="permission denied"):
            _as_reader(rdb, f"SELECT * FROM public.{raw} LIMIT 1")


def test_the_reader_s_queries_have_a_statement_timeout(rdb):
    with rdb.connect() as conn:
        settings = conn.execute(text("SELECT setconfig FROM pg_db_role_setting "
                                     "WHERE setrole = 'streamops_reader'::regrole AND setdatabase = 0")).scalar()
    assert "statement_timeout=60s" in (settings or []), settings


def test_reader_grants_are_made_in_every_migrated_database(test_env):
    name = f"streamops_test_reporting_{__import__('os').getpid()}"
    url = recreate_database(test_env["server"], name)
    eng = create_engine(db.sqlalchemy_url(url))
    try:
        migrate.apply(eng)
        with eng.connect() as conn:
            ok = conn.execute(text(
                "SELECT has_schema_privilege('streamops_reader', 'reporting', 'USAGE'), "
                "has_table_privilege('streamops_reader', 'reporting.sla_daily', 'SELECT'), "
                "has_table_privilege('streamops_reader', 'public.stage_metrics', 'SELECT')")).one()
        assert tuple(ok) == (True, True, False)
        assert migrate.apply_reports(eng) is False, "unchanged reporting SQL is not re-applied"
    finally:
        eng.dispose()
        drop_database(test_env["server"], name)


# -- retention ------------------------------------------------------------------------------------------
def test_retention_drops_old_partitions_and_creates_tomorrows(rdb):
    today = date(2000, 6, 15)  # in the past: the partitions around the real today stay

    def partitions() -> set[str]:
        with rdb.begin() as conn:
            return set(conn.execute(text(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = 'stage_metrics'::regclass AND c.relname ~ '^stage_metrics_2000'")).scalars())

    with rdb.begin() as conn:
        conn.execute(text("SELECT ensure_stage_metrics_partitions(:d, 4)"), {"d": today - timedelta(days=10)})
        conn.execute(text(  # a stray old row in the default partition goes too
            "INSERT INTO stage_metrics (ts, stage_id, run_id, batch_id, input_rows, batch_duration_ms) "
            "VALUES ('2000-05-01T00:00:00Z', 'x.s', 'r', 1, 0, 0)"))
    assert partitions() == {"stage_metrics_20000605", "stage_metrics_20000606", "stage_metrics_20000607",
                            "stage_metrics_20000608"}
    res = retention.apply_retention(keep_days=8, today=today, engine=rdb)
    # cutoff 2000-06-07: the 5th and 6th go, the 7th is kept
    assert sorted(res.dropped) == ["stage_metrics_20000605", "stage_metrics_20000606"]
    assert res.deleted_default_rows == 1 and res.created == 8  # today and 7 days ahead
    assert partitions() == {"stage_metrics_20000607", "stage_metrics_20000608",
                            *(f"stage_metrics_200006{d}" for d in range(15, 23))}
    again = retention.apply_retention(keep_days=8, today=today, engine=rdb)
    assert again.dropped == [] and again.created == 0
    with rdb.begin() as conn:  # leave the test database's partitions as the migration made them
        for p in partitions():
            conn.execute(text(f'DROP TABLE "{p}"'))


def test_a_missed_night_is_drained_from_the_default_partition_the_next_night(rdb):
    """No partition for a day (the night before missed creating it): its rows land in the default
    partition, and creating that day's partition used to fail every night after ("would be
    violated by some row"), blocking retention, data quality and the report for good. Here the
    next night's run creates the day's partition and the one before's is drained too."""
    missed = date(2000, 7, 10)
    with rdb.begin() as conn:
        for day, hour in ((9, 23), (10, 1), (10, 13)):
            conn.execute(text(
                "INSERT INTO stage_metrics (ts, stage_id, run_id, batch_id, input_rows, batch_duration_ms) "
                "VALUES (:ts, 'x.s', 'r', :b, 5, 10)"), {"ts": f"2000-07-{day:02d}T{hour:02d}:00:00Z", "b": hour})
    res = retention.apply_retention(keep_days=8, today=missed, engine=rdb)
    assert res.drained == ["2000-07-09", "2000-07-10"], res
    with rdb.begin() as conn:
        where = conn.execute(text("SELECT tableoid::regclass::text, count(*) FROM stage_metrics "
                                  "WHERE stage_id = 'x.s' GROUP BY 1 ORDER BY 1")).all()
        assert where == [("stage_metrics_20000709", 1), ("stage_metrics_20000710", 2)], "each day in its partition"
        conn.execute(text("DELETE FROM stage_metrics WHERE stage_id = 'x.s'"))
        for p in conn.execute(text(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = 'stage_metrics'::regclass AND c.relname ~ '^stage_metrics_2000'")).scalars().all():
            conn.execute(text(f'DROP TABLE "{p}"'))


def test_retention_deletes_old_rows_of_every_growing_table_but_each_stage_s_last_commit(rdb):
    with rdb.begin() as conn:
        for days_ago in (200, 150):
            conn.execute(text("INSERT INTO sink_commits (stage_id, deployment_id, batch_id, rows, committed_at) "
                              "VALUES ('ra.s', 0, :b, 1, now() - make_interval(days => :d))"),
                         {"b": days_ago, "d": days_ago})
        conn.execute(text("INSERT INTO quarantine (stage_id, batch_id, record_key, raw, raw_size, reason_kind, reason, "
                          "quarantined_at) VALUES ('ra.s', 1, 'k', 'x', 1, 'empty line', 'r', "
                          "now() - interval '100 days')"))
        for batch_id, age in ((1, "2 days"), (2, "1 minute")):  # a dead run's staged batch, and one being written
            conn.execute(text("INSERT INTO sink_staging (stage_id, deployment_id, batch_id, key, value, version, "
                              "staged_at) VALUES ('ra.s', 9, :b, 'k', '{}', 1, now() - CAST(:age AS interval))"),
                         {"b": batch_id, "age": age})
    res = retention.apply_retention(keep_days=8, records_keep_days=90, engine=rdb)
    assert res.deleted["sink_commits"] == 1 and res.deleted["quarantine"] == 1, res.deleted
    assert res.deleted["sink_staging"] == 1, res.deleted
    with rdb.begin() as conn:
        assert conn.execute(text("SELECT batch_id FROM sink_commits WHERE stage_id = 'ra.s'")).scalars().all() == [150]
        assert conn.execute(text("SELECT batch_id FROM sink_staging WHERE stage_id = 'ra.s'")).scalars().all() == [2]
        conn.execute(text("DELETE FROM sink_commits WHERE stage_id = 'ra.s'"))
        conn.execute(text("DELETE FROM sink_staging WHERE stage_id = 'ra.s'"))


def test_retention_refuses_zero_days(rdb):
    with pytest.raises(Exception, match="keep_days must be at least 1"):
        retention.apply_retention(keep_days=0, engine=rdb)


def test_a_change_s_excess_gap_is_its_gap_beyond_the_stage_s_own_commit_interval(rdb):
    """Issue 26: a no-op's "output gap" was 6.7 s and a real live scale-out's 6.5 s: a stage that
    commits every 6-7 s shows that gap with no change at all. The excess over the stage's commit
    interval in the minute before is ~0 for a no-op, and the pause itself for a stop."""
    from streamops.store import reconfigurations as rstore

    add_app(rdb, "g", stages={"s": 4000}, created_at=datetime.now(UTC) - timedelta(hours=1))
    with rdb.connect() as conn:
        dep = conn.execute(text("SELECT id FROM deployments WHERE stage_id = 'g.s'")).scalar_one()
    now = datetime.now(UTC)

    def commits(times: list[datetime], first_batch: int) -> None:
        with rdb.begin() as conn:
            for i, t in enumerate(times):
                conn.execute(text("INSERT INTO sink_commits (stage_id, deployment_id, batch_id, rows, committed_at) "
                                  "VALUES ('g.s', :d, :b, 5, :t)"), {"d": dep, "b": first_batch + i, "t": t})

    # Every 6.5 s for the last two minutes; the "change" at -30 s changed nothing.
    commits([now - timedelta(seconds=120 - 6.5 * i) for i in range(19)], 0)
    gap, interval = rstore.output_gap("g.s", now - timedelta(seconds=30))
    assert round(interval) == 6500 and abs(gap - interval) < 1, (gap, interval)
    noop = add_reconfiguration(rdb, "g.s", "g", now, gap, commit_interval_ms=interval, requested_at=now)

    with rdb.begin() as conn:
        conn.execute(text("DELETE FROM sink_commits WHERE stage_id = 'g.s' AND committed_at > :t"),
                     {"t": now - timedelta(seconds=40)})  # then a 40 s stop: nothing committed until now
    commits([now + timedelta(milliseconds=500)], 100)
    gap, interval = rstore.output_gap("g.s", now - timedelta(seconds=30))
    stop = add_reconfiguration(rdb, "g.s", "g", now, gap, commit_interval_ms=interval, requested_at=now)

    rows = {r["id"]: r for r in view(rdb, "reconfigurations", day=now.date())}
    assert rows[noop]["excess_gap_ms"] < 1 and rows[noop]["downtime_s"] > 6, rows[noop]
    assert round(rows[stop]["excess_gap_ms"]) == 42_500 - 6_500, rows[stop]  # the last commit was at -42 s


def test_a_new_stage_is_observed_from_its_first_query_when_no_input_waited_through_the_launch(rdb):
    """Issue 48 item 10: a fresh demo's 70-90 s launch (JVM, warm-up) counted against R_max,
    though the stage had never served and its first batch was on time. A first run whose first
    batch is within R_max is observed from its query's start; a late first batch (input waited
    through the launch) and any later run's launch still count. A cold first batch whose input
    all came after the query started (the next demo's: 10.8 s on R_max 10 s, its oldest row 9 s
    after the query started) is observed from that oldest row: its own seconds count, the launch
    and the seconds before any input do not."""
    def first_run(app: str, first_p95: float, launch_s: float = 90.0, idle_s: float = 0.0) -> None:
        add_app(rdb, app, r_max_ms=1000, created_at=at(0), in_service=False)
        with rdb.begin() as conn:
            dep = conn.execute(text(
                "INSERT INTO deployments (stage_id, role, pool, cores, state_partitions, config, launcher, "
                "checkpoint, status, started_at, running_at) VALUES (:sid, 'primary', 'p', 1, 2, '{}', 'local', "
                "'/x', 'running', :a, :r) RETURNING id"),
                {"sid": f"{app}.s", "a": at(36000), "r": at(36000 + launch_s)}).scalar_one()
        add_batches(rdb, f"{app}.s", [(at(36000 + launch_s + idle_s + k), first_p95 if k == 0 else 500, None)
                                      for k in range(1800)], deployment_id=dep)

    first_run("fresh", 500)
    first_run("late", 5000)  # the input waited through the launch: its first batch says so
    first_run("cold", 5000, idle_s=10)  # late, but its oldest row (10.3 - 5 s) came after the start
    fresh, late, cold = (one(rdb, "sla_daily", a) for a in ("fresh", "late", "cold"))
    assert fresh["observed_s"] == pytest.approx(FULL_DAY - 36000 - 90)
    assert late["observed_s"] == pytest.approx(FULL_DAY - 36000)
    assert cold["observed_s"] == pytest.approx(FULL_DAY - 36000 - 90 - 5.3)  # the oldest row: 10.3 s - 5 s
    assert cold["seconds_within_rmax"] < fresh["seconds_within_rmax"], "the cold batch's own seconds count"
    # a restart's launch is downtime whatever its first batch: the stage had served before it
    with rdb.begin() as conn:
        conn.execute(text("UPDATE deployments SET status = 'failed', stopped_at = :s WHERE stage_id = 'fresh.s'"),
                     {"s": at(40000)})
        dep = conn.execute(text(
            "INSERT INTO deployments (stage_id, role, pool, cores, state_partitions, config, launcher, checkpoint, "
            "status, started_at, running_at) VALUES ('fresh.s', 'primary', 'p', 1, 2, '{}', 'local', '/y', "
            "'running', :a, :r) RETURNING id"), {"a": at(40000), "r": at(40060)}).scalar_one()
    add_batches(rdb, "fresh.s", [(at(40060), 500, None)], deployment_id=dep)
    assert one(rdb, "sla_daily", "fresh")["observed_s"] == pytest.approx(FULL_DAY - 36000 - 90)


def test_a_batch_that_overran_its_trigger_speaks_for_its_whole_duration(rdb):
    """Spark starts the next batch as soon as an overrunning one ends: the seconds between are that
    batch's, not unmeasured. Before, a demo's taxi stage (median batch 3.2-3.7 s on a 4 s trigger)
    had 260 s of 30 minutes unmeasured, counted as not within R_max."""
    add_app(rdb, "a", r_max_ms=10000, created_at=at(36000), in_service=False)
    add_run(rdb, "a.s", 1, at(36000), at(36600))
    with rdb.begin() as conn:
        for i in range(100):  # a 1 s trigger, every batch 6 s long and 5 s late: the next starts when it ends
            conn.execute(text(
                "INSERT INTO stage_metrics (ts, stage_id, run_id, batch_id, input_rows, batch_duration_ms, "
                "trigger_interval_ms, latency_p50_ms, latency_p95_ms, latency_max_ms) "
                "VALUES (:ts, 'a.s', 'r1', :b, 10, 6000, 1000, 5000, 5500, 6000)"), {"ts": at(36000 + 6 * i), "b": i})
    s = one(rdb, "sla_daily", "a")
    assert s["observed_s"] == pytest.approx(600.0)
    assert s["measured_s"] == s["seconds_within_rmax"] == 600  # before: 100 (1 s of every 6)
    assert one(rdb, "ha_windows_daily", "a")["windows_stalled"] == 0


def test_an_overrunning_batch_and_the_next_never_share_a_window(rdb):
    """Batches of 4.3 s on a 4 s trigger, each started as the last ended, every p95 7 s on an R_max
    of 10 s: every second is within. Before, an overrunning batch spoke for ceil(4.3) = 5 windows
    from the one it started in, met the next batch in one, and sla_daily summed their p95s (14 s):
    a demo's taxi stage had 24 s above R_max in its first 8 minutes where its batches had 12."""
    add_app(rdb, "a", r_max_ms=10000, created_at=at(36000), in_service=False)
    add_run(rdb, "a.s", 1, at(36000), at(36000 + 430))
    with rdb.begin() as conn:
        for i in range(100):
            conn.execute(text(
                "INSERT INTO stage_metrics (ts, stage_id, run_id, batch_id, input_rows, batch_duration_ms, "
                "trigger_interval_ms, latency_p50_ms, latency_p95_ms, latency_max_ms) "
                "VALUES (:ts, 'a.s', 'r1', :b, 10, 4300, 4000, 6000, 7000, 7500)"),
                {"ts": at(36000 + 0.2 + 4.3 * i), "b": i})
    s = one(rdb, "sla_daily", "a")
    assert s["measured_s"] == s["seconds_within_rmax"] == 430, s  # before: 360, 70 windows summed
    assert s["violated_windows"] == 0
    assert one(rdb, "ha_windows_daily", "a")["windows_stalled"] == 0


def test_batches_started_a_few_ms_off_the_trigger_s_grid_never_share_a_window(rdb):
    """Spark starts batches on the trigger's grid, a few ms early or late: 4 s batches at
    k*4 s - 1 ms and k*4 s + 3 ms alternately, every p95 7 s on R_max 10 s. Every second is within.
    Windows taken from the floor of each start made the early batch's first window its
    predecessor's last: a demo's taxi stage had 9 seconds "above R_max" in 10 minutes where all
    its batches were within."""
    add_app(rdb, "a", r_max_ms=10000, created_at=at(36000), in_service=False)
    add_run(rdb, "a.s", 1, at(36000), at(36000 + 400))
    with rdb.begin() as conn:
        for i in range(100):
            conn.execute(text(
                "INSERT INTO stage_metrics (ts, stage_id, run_id, batch_id, input_rows, batch_duration_ms, "
                "trigger_interval_ms, latency_p50_ms, latency_p95_ms, latency_max_ms) "
                "VALUES (:ts, 'a.s', 'r1', :b, 10, 2500, 4000, 6000, 7000, 7500)"),
                {"ts": at(36000 + 4 * i + (-0.001 if i % 2 else 0.003)), "b": i})
    s = one(rdb, "sla_daily", "a")
    assert s["measured_s"] == s["seconds_within_rmax"] >= 399, s  # before: 50 windows summed to 14 s
    assert one(rdb, "ha_windows_daily", "a")["windows_violated"] == 0
