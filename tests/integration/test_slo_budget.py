"""The SLO error budget in production (issue 46 item 2): the re-plan's operator pass counts each
app's seconds measured and above R_max in the short and long burn windows and the UTC day so far
(slo_seconds.sql), hands plan/budget.py's budget to every stage's Operator Manager (mpc's price),
and stores it in slo_budgets, which `streamops status`, the Streams page's model and /metrics
show as streamops_observer. Rows only, no Spark."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from demo.stages import demo_job
from streamops import budget_pass, control, registry
from streamops.execute import stages
from streamops.plan.budget import BASE_PRICE
from streamops.store import db, observe

pytestmark = pytest.mark.db

HISTORY_S = 4200  # 70 minutes of 1 s batches before :now
CREATED_S = 4800  # the app was registered 80 minutes before :now
GAP = range(2341, 2401)  # b.y wrote no batch 39–40 minutes ago: those 60 seconds are not measured
SLOW = range(1, 601)  # the last 10 minutes b.y's p95 is 700 ms: 400 + 700 > R_max 1000
FAST_REPLICA = range(1, 61)  # … but in the last minute its replica answered in 300 ms: within


def _registry() -> registry.Registry:
    def stage() -> dict:
        return {**demo_job("wordcount", {"kind": "files", "path": "b/in"}), "cores": {"initial": 1, "max": 2},
                "state_partitions": 2, "trigger_interval_ms": 1000, "pool": "p", "policy": {"kind": "mpc"}}
    window = {"cron": "0 3 * * *", "duration_min": 30}
    return registry.parse({
        "pools": {"p": {"cores": 4}},
        "apps": {"b": {"r_max_ms": 1000, "slo_target": 0.9, "maintenance_window": window,
                       "stages": {"x": stage(), "y": stage()}},
                 "c": {"r_max_ms": 2000, "maintenance_window": window, "stages": {"z": stage()}}},
    })


def _deployment(conn, stage_id: str, role: str, since: datetime) -> int:
    return conn.execute(text(
        "INSERT INTO deployments (stage_id, role, pool, cores, state_partitions, config, launcher, checkpoint, status, "
        "pid, started_at, running_at) VALUES (:s, :r, 'p', 1, 2, '{}', 'local', '/nowhere', 'running', :pid, :t, :t) "
        "RETURNING id"), {"s": stage_id, "r": role, "pid": os.getpid(), "t": since}).scalar_one()


def _batches(conn, stage_id: str, dep: int, run: str, now: datetime, where: str, p95: str,
             trigger: str = "NULL") -> None:
    """A batch at each of :now − k seconds, k = 1…HISTORY_S where `where` holds (SQL over k)."""
    conn.execute(text(
        "INSERT INTO stage_metrics (ts, stage_id, deployment_id, run_id, batch_id, input_rows, batch_duration_ms, "
        f"trigger_interval_ms, latency_p95_ms) SELECT :now - make_interval(secs => k), :s, :d, :r, {HISTORY_S} - k, "
        f"100, 500, {trigger}, {p95} FROM generate_series(1, {HISTORY_S}) k WHERE {where}"),
        {"now": now, "s": stage_id, "d": dep, "r": run})


@pytest.fixture
def metrics(clean_db):
    """App b (R_max 1 s, SLO 90 %): stages x and y, a batch a second each for 70 minutes; x every
    5 s for a while (5 s trigger), y silent for a minute, slow in the last 10 minutes but for its
    replica's last minute. App c: no batch at all. Returns :now, the database's, whole seconds."""
    stages.sync_registry(_registry())
    with db.transaction() as conn:
        now = conn.execute(text("SELECT date_trunc('second', now())")).scalar_one()
        conn.execute(text("UPDATE apps SET created_at = :t"), {"t": now - timedelta(seconds=CREATED_S)})
        since = now - timedelta(seconds=HISTORY_S + 60)
        x, y = _deployment(conn, "b.x", "primary", since), _deployment(conn, "b.y", "primary", since)
        replica = _deployment(conn, "b.y", "replica-1", since)
        _batches(conn, "b.x", x, "x1", now, "k NOT BETWEEN 2701 AND 3000", "400", "1000")
        _batches(conn, "b.x", x, "x1", now, "k BETWEEN 2705 AND 3000 AND k % 5 = 0", "400", "5000")
        _batches(conn, "b.y", y, "y1", now, f"k NOT BETWEEN {GAP.start} AND {GAP.stop - 1}",
                 f"CASE WHEN k <= {SLOW.stop - 1} THEN 700 ELSE 400 END")
        _batches(conn, "b.y", replica, "y2", now, f"k <= {FAST_REPLICA.stop - 1}", "300")
    observe._engine.cache_clear()
    yield now
    observe._engine.cache_clear()


def _expected(now: datetime, last_k: int) -> tuple[int, int]:
    """(measured, above) seconds among :now − k, k = 1…last_k (and within today and since the app was created)."""
    day_from = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    since_k = min(last_k, int((now - day_from).total_seconds()), CREATED_S)
    ks = range(1, since_k + 1)
    measured = [k for k in ks if k <= HISTORY_S and k not in GAP]
    above = [k for k in measured if k in SLOW and k not in FAST_REPLICA]
    return len(measured), len(above)


def test_the_replan_counts_the_seconds_prices_them_by_the_budget_and_stores_it(metrics, clean_db, monkeypatch):
    now = metrics
    seen = {}  # stage → the budget its Operator Manager was given
    cycle = control.operator_cycle

    def watched(kind, stats, opts, state, ctx):
        seen[stats.stage_id] = ctx.budget
        return cycle(kind, stats, opts, state, ctx)
    monkeypatch.setattr(control, "operator_cycle", watched)
    with db.transaction() as conn:
        rows = {r["app"]: r for r in conn.execute(db.query("slo_seconds"), {
            "now": now, "apps": ["b", "c"], "short_s": [300.0, 300.0], "long_s": [3600.0, 3600.0]}).mappings()}
        control.operator_pass(conn, now, host=(0.1, 0.3))

    # the seconds: 5 minutes of which 4 are above R_max (the last one's replica was fast); the hour
    # lacks y's silent minute; the day so far counts from midnight UTC or from the app's creation
    b = rows["b"]
    assert (b["short_measured_s"], b["short_above_s"]) == (300, 240)
    assert (b["long_measured_s"], b["long_above_s"]) == (3540, 540)
    period_measured, period_above = _expected(now, 10**6)
    assert (b["period_measured_s"], b["period_above_s"]) == (period_measured, period_above)
    assert [rows["c"][f"{w}_{k}_s"] for w in ("short", "long", "period") for k in ("measured", "above")] == [0] * 6

    # the budget: both windows burn faster than 1 (8 and 1.53): the price is the lesser times the base
    budget = seen["b.x"]
    assert budget is not None and seen["b.y"] == budget and "c.z" not in seen  # c's stage has no run
    assert budget.short_burn == pytest.approx(0.8 / 0.1) and budget.long_burn == pytest.approx((540 / 3540) / 0.1)
    assert budget.budget_s == pytest.approx(0.1 * 86400) and budget.spent_s == period_above
    assert budget.price == pytest.approx(BASE_PRICE * budget.long_burn)
    assert budget.rule == "burning faster than the budget allows"

    with clean_db.connect() as conn:
        stored = {r["app"]: r for r in conn.execute(text("SELECT * FROM slo_budgets")).mappings()}
    assert stored["b"]["price"] == pytest.approx(budget.price) and stored["b"]["measured_at"] == now
    assert (stored["b"]["short_s"], stored["b"]["long_s"], stored["b"]["slo_target"]) == (300.0, 3600.0, 0.9)
    # an app with nothing measured is priced at the base price, not at a budget to spare
    assert stored["c"]["price"] == BASE_PRICE and stored["c"]["slo_target"] == 0.99
    assert stored["c"]["rule"].startswith("nothing measured")

    # a stage's own pass (its driver's, every local period) prices with the stored budget, counting nothing
    seen.clear()
    monkeypatch.setattr(budget_pass, "measure", lambda *a, **k: pytest.fail("a stage's pass counted the seconds"))
    with db.transaction() as conn:
        control.operator_pass(conn, now + timedelta(seconds=10), stage="b.y", host=(0.1, 0.3))
    assert seen == {"b.y": budget}


def test_status_the_page_and_metrics_show_the_budget(metrics):
    from streamops.cli import app
    from streamops.report import prometheus
    from streamops.ui import views

    now = metrics
    with db.transaction() as conn:
        budgets = budget_pass.app_budgets(conn, now)
    b = budgets["b"]

    result = CliRunner().invoke(app, ["status", "--wide"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(ln for ln in lines if "budget left" in ln)
    assert all(h in header for h in ("app", "SLO", "burn", "price")), header
    line = next(ln for ln in lines if ln.startswith("│ b "))
    assert f"{b.left:.0%} ({b.spent_s:,.0f}/8,640 s)" in line, line
    assert "8 / 1.5" in line and f"{b.price:,.0f} core-s" in line and "90 %" in line, line
    assert "burning faster" in line, line
    assert "not measured" not in line and "nothing measured" in next(ln for ln in lines if ln.startswith("│ c "))

    page = {a.app: a for a in views.streams()}
    assert page["b"].budget is not None and page["b"].budget.price == pytest.approx(b.price)
    assert page["b"].budget.left_ratio == pytest.approx(b.left)

    values = {(f.name, tuple(sorted(s.labels.items()))): s.value
              for f in prometheus.families(prometheus.read(prometheus.start_of_utc_day())) for s in f.samples}
    assert values[("streamops_slo_burn_rate", (("app", "b"), ("window", "short")))] == pytest.approx(8.0)
    assert values[("streamops_slo_burn_rate", (("app", "b"), ("window", "long")))] == pytest.approx(b.long_burn)
    assert values[("streamops_slo_price_core_seconds", (("app", "b"),))] == pytest.approx(b.price)
    assert values[("streamops_slo_budget_seconds", (("app", "b"),))] == pytest.approx(8640.0)
    assert values[("streamops_slo_budget_left_ratio", (("app", "b"),))] == pytest.approx(b.left)
    assert values[("streamops_slo_price_core_seconds", (("app", "c"),))] == BASE_PRICE


def test_the_next_cycle_counts_only_the_seconds_since_the_settled_ones_and_agrees_with_a_recount(metrics, clean_db):
    now = metrics
    later = now + timedelta(seconds=60)
    if later.astimezone(UTC).date() != now.astimezone(UTC).date():
        pytest.skip("the minute crosses 00:00 UTC: a new day's budget")

    def seconds(at: datetime) -> dict:
        with db.transaction() as conn:
            conn.execute(db.query("slo_seconds_settings"))
            return dict(conn.execute(db.query("slo_seconds"), {
                "now": at, "apps": ["b"], "short_s": [300.0], "long_s": [3600.0]}).mappings().one())

    with db.transaction() as conn:
        first = budget_pass.app_budgets(conn, now)["b"]
    with clean_db.connect() as conn:
        settled = conn.execute(text("SELECT settled_to, settled_measured_s, settled_above_s FROM slo_budgets "
                                    "WHERE app = 'b'")).mappings().one()
    # settled: up to the long window's start, never before the app was created or before today (a
    # re-plan in the first hour after 00:00 UTC settles nothing of yesterday)
    day_from = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    assert settled["settled_to"] == max(now - timedelta(seconds=3600), now - timedelta(seconds=CREATED_S), day_from)
    # the next minute: both stages answer, 400 + 700 ms, above R_max every second
    with db.transaction() as conn:
        for stage, run, p95 in (("b.x", "x1", 400), ("b.y", "y1", 700)):
            conn.execute(text(
                "INSERT INTO stage_metrics (ts, stage_id, deployment_id, run_id, batch_id, input_rows, "
                "batch_duration_ms, latency_p95_ms) SELECT :now + make_interval(secs => j), :s, "
                "(SELECT id FROM deployments WHERE stage_id = :s AND role = 'primary'), :r, 10000 + j, 100, 500, :p "
                "FROM generate_series(0, 59) j"), {"now": now, "s": stage, "r": run, "p": p95})
    incremental = seconds(later)
    with db.transaction() as conn:
        again = budget_pass.app_budgets(conn, later)["b"]
    assert again.spent_s == first.spent_s + 60 == incremental["period_above_s"]
    with clean_db.begin() as conn:
        conn.execute(text("DELETE FROM slo_budgets"))
    recount = seconds(later)  # the whole day counted again: the same figures
    assert {k: v for k, v in incremental.items() if not k.startswith("settled")} == \
        {k: v for k, v in recount.items() if not k.startswith("settled")}


def test_a_batch_that_overran_its_trigger_speaks_for_its_whole_duration(metrics, clean_db):
    """As reporting.sla_daily (Spark starts the next batch as soon as an overrunning one ends): y's
    batch before its silent minute took 61 s, so that minute is measured after all."""
    now = metrics
    query = {"now": now, "apps": ["b"], "short_s": [300.0], "long_s": [3600.0]}
    with db.transaction() as conn:
        before = conn.execute(db.query("slo_seconds"), query).mappings().one()
        conn.execute(text("UPDATE stage_metrics SET batch_duration_ms = 61000 WHERE stage_id = 'b.y' AND run_id = 'y1' "
                          "AND ts = :ts"), {"ts": now - timedelta(seconds=GAP.stop)})
        after = conn.execute(db.query("slo_seconds"), query).mappings().one()
    assert (before["long_measured_s"], after["long_measured_s"]) == (3540, 3600)
    day_from = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    today = sum(1 for k in GAP if now - timedelta(seconds=k) >= day_from)  # all of it, unless just after 00:00
    assert after["period_measured_s"] == before["period_measured_s"] + today
