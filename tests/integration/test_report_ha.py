"""The high-availability views (sql/reports/60_ha.sql) and the report's "High availability" section,
from hand-built rows on real PostgreSQL: replica-hours beside core-hours, failures and MTTR per
cause, and violated 1-second windows with and without redundancy."""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

import pytest
from sqlalchemy import text

from streamops.report import nightly
from streamops.store import db
from tests.integration.test_report import two_apps
from tests.integration.test_reporting_sql import (
    FULL_DAY,
    P_A,
    R_A,
    D,
    add_app,
    add_batches,
    add_reconfiguration,
    at,
    one,
    replicated_app,
    view,
)

pytestmark = pytest.mark.db


@pytest.fixture
def hdb(clean_db):
    with clean_db.begin() as conn:
        assert conn.execute(text("SHOW TimeZone")).scalar_one() == "UTC", "conftest pins PGTZ=UTC"
        conn.execute(text("TRUNCATE reports, dq_results"))
        conn.execute(text("INSERT INTO pools (name, master, cores) VALUES ('p', 'local', 8)"))
    return clean_db


def run(engine, stage_id: str, role: str, cores: int, start: datetime, running: datetime | None,
        stop: datetime | None, status: str = "stopped") -> int:
    with engine.begin() as conn:
        return conn.execute(text(
            "INSERT INTO deployments (stage_id, role, pool, cores, state_partitions, config, launcher, checkpoint, "
            "status, started_at, running_at, stopped_at) VALUES (:sid, :role, 'p', :c, 2, '{}', 'local', '/x', :st, "
            ":a, :r, :b) RETURNING id"),
            {"sid": stage_id, "role": role, "c": cores, "st": status, "a": start, "r": running, "b": stop}).scalar_one()


def failure(engine, stage_id: str, app: str, deployment_id: int | None, failed_s: float, *, role: str = "primary",
            kind: str = "dead_pid", detected_by: str = "supervisor", recovered_s: float | None = None,
            mttr_ms: float | None = None, downtime_ms: float | None = None, status: str | None = None,
            fault: str | None = None, day: date = D) -> int:
    """A failure at `failed_s` of `day`; with `fault`, an injected_faults row of that kind first."""
    with engine.begin() as conn:
        fault_id = None
        if fault:
            fault_id = conn.execute(text(
                "INSERT INTO injected_faults (stage_id, deployment_id, role, kind, source, injected_at) "
                "VALUES (:sid, :d, :role, :k, 'schedule', :at) RETURNING id"),
                {"sid": stage_id, "d": deployment_id, "role": role, "k": fault, "at": at(failed_s, day)}).scalar_one()
        rec = at(recovered_s, day) if recovered_s is not None else None
        return conn.execute(text(
            "INSERT INTO failures (stage_id, app, deployment_id, role, kind, detail, failed_at, last_commit_at, "
            "detected_at, status, recovered_at, closed_at, mttr_ms, downtime_ms, cause, fault_id, detected_by) "
            "VALUES (:sid, :app, :d, :role, :kind, 'test', :f, :f, :f, :st, :rec, :rec, :mttr, :down, :cause, "
            ":fid, :by) RETURNING id"),
            {"sid": stage_id, "app": app, "d": deployment_id, "role": role, "kind": kind, "f": at(failed_s, day),
             "st": status or ("recovered" if rec else "recovering"), "rec": rec, "mttr": mttr_ms, "down": downtime_ms,
             "cause": "injected" if fault else "real", "fid": fault_id, "by": detected_by}).scalar_one()


def batches(engine, stage_id: str, deployment_id: int, first_s: int, last_s: int, p95_sql: str = "500",
            day: date = D) -> None:
    """One batch per second in [first_s, last_s) of `day` by run `deployment_id`, 0.25 s into its
    second, p50 = p95 / 10 (so p90 = p95 · 0.9); `p95_sql` is an SQL expression of the second `s`."""
    with engine.begin() as conn:
        conn.execute(text("SELECT ensure_stage_metrics_partitions(CAST(:d AS date), 1)"), {"d": day})
        conn.execute(text(
            "INSERT INTO stage_metrics (ts, stage_id, deployment_id, run_id, batch_id, input_rows, batch_duration_ms, "
            " trigger_interval_ms, latency_p50_ms, latency_p95_ms, latency_max_ms, cores) "
            f"SELECT CAST(:d AS date)::timestamptz + make_interval(secs => s + 0.25), :sid, :dep, 'run-' || :dep, s, "
            f"       10, 300, 1000, 0.1 * ({p95_sql}), {p95_sql}, {p95_sql}, 2 "
            "FROM generate_series(CAST(:a AS integer), CAST(:b AS integer) - 1) s"),
            {"d": day, "sid": stage_id, "dep": deployment_id, "a": first_s, "b": last_s})


def slow(*spans: tuple[int, int]) -> str:
    """p95 3 000 ms (p90 2 700 > R_max 1 000) in the spans, 500 ms elsewhere."""
    return "CASE WHEN " + " OR ".join(f"(s >= {a} AND s < {b})" for a, b in spans) + " THEN 3000 ELSE 500 END"


def ha_day(engine, day: date = D) -> dict[str, int]:
    """App `ha` (R_max 1 s), stage `ha.s` with replicas = 2, on `day`:

    - P1, the primary, 2 cores, from the day before, dies at 20 000 s (a real dead_pid the watchdog
      found, recovered at 20 010 s: MTTR 10 s, output gap 10 s); stopped at 20 003 s;
    - R1a, replica-1, 2 cores, started at 3 600 s, running from 3 610 s, killed by an injected
      driver_kill at 7 200 s (the supervisor restarts it: MTTR 6 s; P1's output masked it: gap 1 s);
      stopped at 7 203 s;
    - R1b, replica-1 again, started 7 202 s, running from 7 204 s, 2 cores then 4 from 9 000 s, removed at 10 800 s;
    - P2, the new primary, started 20 002 s, running from 20 005 s, live (never stopped).

    Batches: every second each run is running, 500 ms, except P1 and R1a both slow in 6 000–6 020 s,
    P1 alone slow in 5 000–5 100 s (R1a fast: not a slow window), P2 slow in 30 000–30 050 s; P2's
    first batch at 20 010 s, so 20 000–20 009 s have none.
    """
    add_app(engine, "ha", r_max_ms=1000, created_at=at(-30 * 86400, day), in_service=False)
    with engine.begin() as conn:
        conn.execute(text("UPDATE stages SET replicas = 2 WHERE stage_id = 'ha.s'"))
    ids = {
        "P1": run(engine, "ha.s", "primary", 2, at(-3600, day), at(-3600, day), at(20003, day), "failed"),
        "R1a": run(engine, "ha.s", "replica-1", 2, at(3600, day), at(3610, day), at(7203, day), "failed"),
        "R1b": run(engine, "ha.s", "replica-1", 2, at(7202, day), at(7204, day), at(10800, day)),
        "P2": run(engine, "ha.s", "primary", 2, at(20002, day), at(20005, day), None, "running"),
    }
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO deployment_scaling (deployment_id, from_cores, to_cores, at) "
                          "VALUES (:d, 2, 4, :at)"), {"d": ids["R1b"], "at": at(9000, day)})
    failure(engine, "ha.s", "ha", ids["P1"], 20000, detected_by="watchdog", recovered_s=20010, mttr_ms=10000,
            downtime_ms=10000)
    failure(engine, "ha.s", "ha", ids["R1a"], 7200, role="replica-1", fault="driver_kill", recovered_s=7206,
            mttr_ms=6000, downtime_ms=1000)
    batches(engine, "ha.s", ids["P1"], 0, 20000, slow((5000, 5100), (6000, 6020)), day)
    batches(engine, "ha.s", ids["R1a"], 3610, 7200, slow((6000, 6020)), day)
    batches(engine, "ha.s", ids["R1b"], 7204, 10800, day=day)
    batches(engine, "ha.s", ids["P2"], 20010, 86400, slow((30000, 30050)), day)
    return ids


# -- replica-hours beside core-hours ---------------------------------------------------------------
def test_replica_hours_and_core_hours_count_every_role(hdb):
    ha_day(hdb)
    c = one(hdb, "ha_cost_daily", "ha")
    assert (c["stage_id"], c["replicas"], c["runs"], c["replica_runs"], c["max_live_runs"]) == ("ha.s", 2, 4, 2, 3)
    # held from start to stop, clipped to the day: P1 20 003 s, R1a 3 603 s, R1b 3 598 s, P2 66 398 s
    assert c["run_hours"] == pytest.approx((20003 + 3603 + 3598 + 66398) / 3600)
    assert c["replica_hours"] == pytest.approx((3603 + 3598) / 3600)
    # 2 cores each, R1b 4 cores for its last 1 800 s
    assert c["core_hours"] == pytest.approx((2 * (20003 + 3603 + 1798 + 66398) + 4 * 1800) / 3600)
    assert c["replica_core_hours"] == pytest.approx((2 * 3603 + 2 * 1798 + 4 * 1800) / 3600)
    # runs beyond the first: the replicas' 7 201 s (P1 was there throughout), and P1/P2's 1 s overlap
    assert c["redundant_hours"] == pytest.approx((7201 + 1) / 3600)
    # the stages' core-hours add up to cost_daily's for the app
    assert one(hdb, "cost_daily", "ha")["core_hours"] == pytest.approx(c["core_hours"])


def test_a_stage_without_replicas_has_none(hdb):
    add_app(hdb, "solo")                        # one run of 1 core all day
    c = one(hdb, "ha_cost_daily", "solo")
    assert (c["runs"], c["replica_runs"], c["max_live_runs"]) == (1, 0, 1)
    assert (c["core_hours"], c["run_hours"]) == (pytest.approx(24.0), pytest.approx(24.0))
    assert c["replica_hours"] == c["replica_core_hours"] == c["redundant_hours"] == 0


# -- failures and MTTR per cause --------------------------------------------------------------------
def test_failures_per_cause_with_the_injected_fault_kind(hdb):
    ha_day(hdb)
    rows = view(hdb, "ha_failures_daily", app="ha")
    got = {r["cause"]: r for r in rows}
    assert sorted(got) == ["injected", "real"] and len(rows) == 2
    real, inj = got["real"], got["injected"]
    assert (real["kind"], real["fault_kind"], real["detected_by"]) == ("dead_pid", None, "watchdog")
    assert (inj["kind"], inj["fault_kind"], inj["detected_by"]) == ("dead_pid", "driver_kill", "supervisor")
    assert (real["failures"], real["failures_of_replicas"], real["recovered"], real["gave_up"], real["open"]) \
        == (1, 0, 1, 0, 0)
    assert (inj["failures"], inj["failures_of_replicas"], inj["recovered"]) == (1, 1, 1)
    assert (real["mttr_p50_s"], real["mttr_max_s"], real["gap_p50_s"]) == (10.0, 10.0, 10.0)
    assert (inj["mttr_p50_s"], inj["mttr_max_s"], inj["gap_p50_s"], inj["gap_max_s"]) == (6.0, 6.0, 1.0, 1.0)


def test_mttr_percentiles_per_cause_and_the_failures_that_did_not_recover(hdb):
    add_app(hdb, "f")
    for i, (mttr, gap) in enumerate([(2, 0.5), (4, 1.0), (9, 3.0)]):   # three injected kills
        failure(hdb, "f.s", "f", None, 1000 + 100 * i, role="replica-1", fault="driver_kill",
                recovered_s=1000 + 100 * i + mttr, mttr_ms=mttr * 1000, downtime_ms=gap * 1000)
    # an injected heartbeat cut the watchdog found, recovered without a measured MTTR: recovered_at − failed_at
    failure(hdb, "f.s", "f", None, 5000, kind="stale_heartbeat", detected_by="watchdog", fault="heartbeat_cut",
            recovered_s=5030)
    failure(hdb, "f.s", "f", None, 8000, kind="query_failed", status="gave_up")      # real, given up
    failure(hdb, "f.s", "f", None, 86390, kind="query_failed", role="replica-2")    # real, still open
    failure(hdb, "f.s", "f", None, 500, recovered_s=510, mttr_ms=10000, day=D - timedelta(days=1))  # the day before
    rows = {(r["cause"], r["kind"]): r for r in view(hdb, "ha_failures_daily", app="f")}
    assert sorted(rows) == [("injected", "dead_pid"), ("injected", "stale_heartbeat"), ("real", "query_failed")]
    kills = rows["injected", "dead_pid"]
    assert (kills["failures"], kills["recovered"], kills["failures_of_replicas"]) == (3, 3, 3)
    assert (kills["mttr_p50_s"], kills["mttr_max_s"]) == (4.0, 9.0)
    assert (kills["gap_p50_s"], kills["gap_max_s"]) == (1.0, 3.0)
    cut = rows["injected", "stale_heartbeat"]
    assert (cut["fault_kind"], cut["detected_by"], cut["mttr_p50_s"], cut["gap_p50_s"]) \
        == ("heartbeat_cut", "watchdog", 30.0, 30.0)
    bad = rows["real", "query_failed"]
    assert (bad["failures"], bad["recovered"], bad["gave_up"], bad["open"], bad["failures_of_replicas"]) \
        == (2, 0, 1, 1, 1)
    assert bad["mttr_p50_s"] is None and bad["gap_max_s"] is None
    # the same failures as downtime_daily counts
    assert one(hdb, "downtime_daily", "f")["failures"] == sum(r["failures"] for r in rows.values()) == 6


# -- violated windows with and without redundancy ---------------------------------------------------
def test_violated_windows_with_and_without_redundancy(hdb):
    ha_day(hdb)
    w = one(hdb, "ha_windows_daily", "ha")
    assert (w["stage_id"], w["r_max_ms"], w["windows_observed"]) == ("ha.s", 1000, 86400)
    # no batch 20 000–20 009 s (P1 died, P2's first batch at 20 010 s)
    assert (w["windows_measured"], w["windows_stalled"]) == (86390, 10)
    # slow: 6 000–6 019 (both runs slow) and 30 000–30 049 (P2 alone); not 5 000–5 099 (R1a was fast)
    assert w["windows_slow"] == 70 and w["windows_violated"] == 80
    assert w["share_violated"] == pytest.approx(80 / FULL_DAY)
    # two runs live through the whole window: 3 610–7 199 (P1 + R1a, whose life ends at its failure)
    # and 7 204–10 799 (P1 + R1b); 20 002–20 005 is not (P1 had failed at 20 000, P2 ran from 20 005)
    assert w["windows_with_redundancy"] == 3590 + 3596
    assert w["violated_with_redundancy"] == 20
    assert w["share_violated_with_redundancy"] == pytest.approx(20 / 7186)
    assert w["windows_without_redundancy"] == 86400 - 7186
    assert w["violated_without_redundancy"] == 60
    assert w["share_violated_without_redundancy"] == pytest.approx(60 / (86400 - 7186))


def test_windows_of_a_single_run_stage_agree_with_sla_daily(clean_db):
    """One stage, one run at a time: slow windows are sla_daily's violated windows, measured ones its
    measured seconds, and nothing is with redundancy."""
    two_apps(clean_db, D)
    sla, w = one(clean_db, "sla_daily", "taxi"), one(clean_db, "ha_windows_daily", "taxi")
    assert w["windows_observed"] == FULL_DAY
    assert (w["windows_slow"], w["windows_measured"]) == (sla["violated_windows"], sla["measured_s"]) == (600, 86374)
    assert w["windows_stalled"] == 26 and w["windows_violated"] == 626
    assert w["windows_with_redundancy"] == 0 and w["share_violated_with_redundancy"] is None
    assert (w["windows_without_redundancy"], w["violated_without_redundancy"]) == (86400, 626)


def test_several_batches_of_a_run_in_a_window_count_with_their_mean(hdb):
    """A 500 ms trigger: two batches per window, one slow and one fast. Their mean decides, as in
    sla_daily: 2 700 and 450 ms (mean 1 575) is slow, 1 350 and 450 ms (mean 900) is not."""
    add_app(hdb, "q", r_max_ms=1000, stages={"s": 500})
    rows = []
    for s, first in [(100 + i, 3000) for i in range(10)] + [(110 + i, 1500) for i in range(10)]:
        rows += [(at(s + 0.1), first, first / 10), (at(s + 0.6), 500, 50)]
    add_batches(hdb, "q.s", rows, trigger_ms=500)
    w, sla = one(hdb, "ha_windows_daily", "q"), one(hdb, "sla_daily", "q")
    assert (w["windows_measured"], w["windows_slow"]) == (sla["measured_s"], sla["violated_windows"]) == (20, 10)
    assert w["windows_violated"] == 86400 - 20 + 10


def test_an_active_backup_overlap_is_redundancy_and_a_starting_run_is_not(hdb):
    add_app(hdb, "b", in_service=False)
    old = run(hdb, "b.s", "primary", 1, at(0), at(0), at(1000.5))
    run(hdb, "b.s", "secondary", 1, at(900), at(930.5), at(86400))   # starts at 900 s, running from 930.5 s
    batches(hdb, "b.s", old, 0, 1000)
    w = one(hdb, "ha_windows_daily", "b")
    assert w["windows_with_redundancy"] == 1000 - 931                  # whole windows 931–999
    assert w["windows_stalled"] == 86400 - 1000                        # the secondary wrote no batch
    c = one(hdb, "ha_cost_daily", "b")
    assert (c["replica_hours"], c["max_live_runs"]) == (0, 2)
    assert c["redundant_hours"] == pytest.approx(100.5 / 3600)          # held: 900 → 1 000.5 s


def test_today_and_a_day_without_service(hdb):
    """Today is observed up to now; a day before the app existed has no rows."""
    add_app(hdb, "a", created_at=datetime.now().astimezone() - timedelta(days=2))
    with hdb.begin() as conn:
        today = conn.execute(text("SELECT current_date")).scalar_one()
    w = one(hdb, "ha_windows_daily", "a", today)
    assert 0 < w["windows_observed"] <= 86400 and w["windows_violated"] == w["windows_stalled"]
    for v in ("ha_cost_daily", "ha_failures_daily", "ha_windows_daily"):
        assert view(hdb, v, today - timedelta(days=10)) == []


def test_the_reader_selects_the_ha_views(hdb):
    ha_day(hdb)
    with hdb.connect() as conn:
        conn.execute(text("SET ROLE streamops_reader"))
        try:
            for v in ("ha_cost_daily", "ha_failures_daily", "ha_windows_daily"):
                assert conn.execute(text(f"SELECT count(*) FROM reporting.{v} WHERE day = :d"),
                                    {"d": D}).scalar_one() > 0
            with pytest.raises(Exception, match="permission denied"):
                conn.execute(text("SELECT * FROM public.injected_faults"))
        finally:
            conn.rollback()


def test_filter_on_day_calls_each_function_once(hdb):
    add_app(hdb, "a", created_at=at(-400 * 86400))
    with hdb.begin() as conn:
        for v, fn in (("ha_cost_daily", "ha_cost_for_day"), ("ha_failures_daily", "ha_failures_for_day"),
                      ("ha_windows_daily", "ha_windows_for_day")):
            plan = "\n".join(conn.execute(text(
                f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) SELECT * FROM reporting.{v} WHERE day = :d"),
                {"d": D}).scalars())
            lines = [line for line in plan.splitlines() if fn in line]
            assert lines and "loops=1)" in lines[0], plan


# -- sla_daily, downtime_daily and the response chart with replicas ---------------------------------
def test_sla_daily_takes_an_ha_stages_fastest_run_as_ha_windows_daily_does(hdb):
    """Two runs in 3 610–7 199 s and 7 204–10 799 s: each window counts with the faster of them, so
    the response stays at 500 ms (not 1 000 ms), and P1's slow 5 000–5 099 s is covered by R1a. A
    one-stage app's violated windows are then ha_windows_daily's slow ones."""
    ha_day(hdb)
    s, w = one(hdb, "sla_daily", "ha"), one(hdb, "ha_windows_daily", "ha")
    assert s["measured_s"] == w["windows_measured"] == 86390
    assert s["violated_windows"] == w["windows_slow"] == 70
    assert s["seconds_within_rmax"] == 86390 - 70
    assert s["response_p50_ms"] == s["response_p95_ms"] == s["response_p99_ms"] == pytest.approx(500.0)
    # every run's batches: P1 20 000, R1a 3 590, R1b 3 596, P2 66 390; slow: P1 120, R1a 20, P2 50
    assert (s["batches"], s["batches_within_slo"]) == (93576, 93576 - 190)


def test_a_failure_masked_by_a_replica_is_a_gap_from_its_last_output(hdb):
    """R1a died at 7 200 s, P1 committed 1 s later (downtime_ms 1 000), R1a recovered at 7 206 s: the
    gap is 7 200–7 201 s, inside a reconfiguration's 7 195–7 203 s, not 7 205–7 206 s after it."""
    ha_day(hdb)
    add_reconfiguration(hdb, "ha.s", "ha", at(7203), 8000)
    d = one(hdb, "downtime_daily", "ha")
    assert d["downtime_failure_s"] == pytest.approx(1.0 + 10.0)          # R1a's 1 s, P1's 10 s
    assert d["downtime_s"] == pytest.approx(8.0 + 10.0)


def _series(engine, app: str, bucket_s: int) -> list[dict]:
    with engine.begin() as conn:
        return [dict(r._mapping) for r in conn.execute(db.query("report_response_series"),
                                                       {"day": D, "app": app, "bucket_s": bucket_s})]


def test_the_response_chart_takes_the_fastest_run_and_sums_the_replicas_cores(hdb):
    """App h: stage a's primary and replica-1 (2 cores each) beside stage b (100 ms, 1 core)."""
    replicated_app(hdb)
    ones = _series(hdb, "h", 1)
    assert [r["bucket"] for r in ones] == list(range(43200, 43211))
    both = [min(p, r) + 100 for p, r in zip(P_A, R_A[:-1], strict=True)]  # R_A runs one second longer
    assert [r["response_ms"] for r in ones] == [*both, R_A[-1] + 100]
    assert [r["response_max_ms"] for r in ones] == [r["response_ms"] for r in ones]
    assert [r["cores"] for r in ones] == [2 + 2 + 1] * 10 + [2 + 1]    # R alone in the last second
    assert all(r["complete"] for r in ones)
    # 10-second buckets: the faster run's mean, not the mean of each second's faster batch
    tens = _series(hdb, "h", 10)
    assert [r["bucket"] for r in tens] == [4320, 4321]
    assert tens[0]["response_ms"] == pytest.approx(min(sum(P_A) / 10, sum(R_A[:10]) / 10) + 100)   # 1 010 + 100
    assert tens[0]["response_max_ms"] == pytest.approx(min(max(P_A), max(R_A[:10])) + 100)         # 1 800 + 100
    assert tens[0]["cores"] == 5 and tens[1]["cores"] == 3


# -- the report's section ---------------------------------------------------------------------------
def _section(html: str) -> str:
    m = re.search(r'<h2 id="ha">High availability</h2>(.*?)(?=<h2)', html, re.S)
    assert m, "the report has its High availability section"
    return m.group(1)


def test_report_shows_the_high_availability_section(hdb, tmp_path):
    ha_day(hdb)
    index = nightly.build_report(D, out_dir=tmp_path)
    sec = _section(index.read_text())
    cost = re.search(r'<table id="ha-cost">(.*?)</table>', sec, re.S).group(1)
    cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", cost, re.S)]
    # app, stage, replicas, runs, most at once, run-hours, replica-hours, beyond the first, core-hours,
    # replica core-hours
    assert cells == ["ha", "ha.s", "2", "4 (2 replicas)", "3", "26.00", "2.00", "2.00", "53.00", "5.00"]
    failures = re.search(r'<table id="ha-failures">(.*?)</table>', sec, re.S).group(1)
    assert "driver_kill" in failures and "injected" in failures and "real" in failures
    assert "6.0 s" in failures and "10.0 s" in failures
    windows = re.search(r'<table id="ha-windows">(.*?)</table>', sec, re.S).group(1)
    assert "7,186" in windows and "79,214" in windows and f"{100 * 20 / 7186:.3f} %" in windows
    assert re.search(r'<img class="chart" id="ha-chart"[^>]+src="data:image/png;base64,', sec)
    for name in ("ha_cost_daily", "ha_failures_daily", "ha_windows_daily"):
        assert (index.parent / f"{name}.csv").exists()
    with hdb.connect() as conn:
        summary = conn.execute(text("SELECT summary FROM reports")).scalar_one()
    assert summary["ha"] == {"replica_hours": pytest.approx(7201 / 3600), "failures_real": 1, "failures_injected": 1}


def test_report_without_failures_or_replicas_says_so(hdb, tmp_path):
    add_app(hdb, "solo")
    sec = _section(nightly.build_report(D, out_dir=tmp_path).read_text())
    assert 'id="ha-no-replicas"' in sec and 'id="ha-no-failures"' in sec
    assert 'id="ha-chart"' not in sec and 'id="ha-windows"' in sec
    # a day before any app: the section is there and empty
    sec = _section(nightly.build_report(D - timedelta(days=400), out_dir=tmp_path).read_text())
    assert 'id="ha-no-stages"' in sec and 'id="ha-no-failures"' in sec
