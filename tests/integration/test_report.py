"""The nightly report (report/nightly.py) from hand-built rows on real PostgreSQL: the exact figures
of its summary table, the CSVs and the `reports` row, the data-quality section, `streamops
status`'s pointer to it, and a screenshot of the page in headless Chromium."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import time
from datetime import UTC, date, datetime, timedelta

import numpy as np
import pytest
from PIL import Image
from sqlalchemy import text

from streamops.report import nightly
from tests.integration.test_reporting_sql import FULL_DAY, D, add_app, add_failure, add_reconfiguration, add_run, at

# taxi: one stage, a batch every second all day at 500 ms except 600 s at 3000 ms; a scale-out whose
# output gap is 6 s (39 994 → 40 000 s) and a failure whose gap is 20 s (60 000 → 60 020 s).
# web: registered at noon, two stages (400 + 700 ms), 3 600 s at 400 + 1200 ms above its 1500 ms bound.
TAXI_SPIKE = (36000, 36600)
TAXI_GAPS = [(39994, 40000), (60000, 60020)]
WEB_SPIKE = (50000, 53600)


def _batches(engine, day: date, stage_id: str, first_s: int, last_s: int, p95_sql: str, cores_sql: str = "1",
             gaps: list[tuple[int, int]] = ()) -> None:
    """One batch per second in [first_s, last_s) of `day`, started 0.25 s into its second; SQL
    expressions of the second `s` give p95 and cores. Generated in SQL: a day is 86 400 rows."""
    not_gap = " AND ".join(f"NOT (s >= {a} AND s < {b})" for a, b in gaps) or "true"
    with engine.begin() as conn:
        conn.execute(text("SELECT ensure_stage_metrics_partitions(CAST(:d AS date), 1)"), {"d": day})
        conn.execute(text(
            "INSERT INTO stage_metrics (ts, stage_id, run_id, batch_id, input_rows, batch_duration_ms, "
            " trigger_interval_ms, latency_p50_ms, latency_p95_ms, latency_max_ms, cores) "
            f"SELECT CAST(:d AS date)::timestamptz + make_interval(secs => s + 0.25), :sid, 'r1', s, 10, 300, 1000, "
            f"       0.6 * ({p95_sql}), {p95_sql}, {p95_sql}, {cores_sql} "
            f"FROM generate_series(:a, :b - 1) s WHERE {not_gap}"),
            {"d": day, "sid": stage_id, "a": first_s, "b": last_s})


def two_apps(eng, day: date) -> None:
    """The rows above, on `day`."""
    with eng.begin() as conn:
        assert conn.execute(text("SHOW TimeZone")).scalar_one() == "UTC", "conftest pins PGTZ=UTC"
        conn.execute(text("TRUNCATE reports, dq_results"))
        conn.execute(text("INSERT INTO pools (name, master, cores) VALUES ('p', 'local', 8)"))
    # in service through the runs added below
    add_app(eng, "taxi", r_max_ms=1000, in_service=False)
    add_app(eng, "web", r_max_ms=1500, created_at=at(43200, day), stages={"a": 1000, "b": 1000}, in_service=False)
    with eng.begin() as conn:  # the specs `streamops deploy` writes: β and the SLO target
        conn.execute(text("""UPDATE apps SET spec = '{"control": {"beta": 0.5}, "slo_target": 0.99}' """
                          "WHERE name = 'taxi'"))
    _batches(eng, day, "taxi.s", 0, 86400,
             f"CASE WHEN s >= {TAXI_SPIKE[0]} AND s < {TAXI_SPIKE[1]} THEN 3000 ELSE 500 END",
             cores_sql="CASE WHEN s >= 40000 THEN 2 ELSE 1 END", gaps=TAXI_GAPS)
    _batches(eng, day, "web.a", 43200, 86400, "400")
    _batches(eng, day, "web.b", 43200, 86400,
             f"CASE WHEN s >= {WEB_SPIKE[0]} AND s < {WEB_SPIKE[1]} THEN 1200 ELSE 700 END")
    add_reconfiguration(eng, "taxi.s", "taxi", at(40000, day), 6000, repartition_ms=3500)
    add_failure(eng, "taxi.s", "taxi", failed_at=at(60000, day), last_commit_at=at(60000, day),
                recovered_at=at(60020, day), downtime_ms=20000, mttr_ms=20000)
    add_run(eng, "taxi.s", 1, at(0, day), at(40000, day))
    add_run(eng, "taxi.s", 2, at(40000, day), at(86400, day))
    add_run(eng, "web.a", 1, at(43200, day), at(86400, day))
    add_run(eng, "web.b", 1, at(43200, day), at(86400, day))


@pytest.fixture
def day_of_two_apps(clean_db):
    two_apps(clean_db, D)
    return clean_db


def _add_dq(engine, success: bool) -> None:
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO dq_results (suite, target, app, day, success, statistics, details) "
            "VALUES ('stage_metrics', 'stage_metrics', NULL, :d, :ok, CAST(:st AS jsonb), CAST(:det AS jsonb))"),
            {"d": D, "ok": success,
             "st": json.dumps({"evaluated_expectations": 4, "successful_expectations": 4 if success else 3}),
             "det": json.dumps({} if success else {"failed": [
                 {"expectation": "expect_column_values_to_be_between", "column": "input_rps",
                  "observed": "3 rows < 0"}]})})


@pytest.mark.db
def test_summary_table_figures_are_exact(day_of_two_apps, tmp_path):
    index = nightly.build_report(D, out_dir=tmp_path)
    assert index == tmp_path / D.isoformat() / "index.html"
    with day_of_two_apps.connect() as conn:
        rec = conn.execute(text("SELECT * FROM reports")).one()
    assert (rec.day, rec.app, rec.path) == (D, None, str(index.resolve()))
    taxi, web = rec.summary["apps"]["taxi"], rec.summary["apps"]["web"]

    measured = FULL_DAY - 6 - 20
    assert taxi["measured_s"] == measured
    assert taxi["share_within_rmax"] == pytest.approx((measured - 600) / FULL_DAY)     # 0.99275
    assert taxi["slo_met"] is True and taxi["slo_target"] == 0.99 and taxi["beta"] == 0.5
    assert taxi["violated_windows"] == 600
    assert taxi["availability"] == pytest.approx(1 - 26 / FULL_DAY)
    assert (taxi["downtime_reconfig_s"], taxi["downtime_failure_s"]) == (pytest.approx(6.0), pytest.approx(20.0))
    assert (taxi["reconfigurations"], taxi["failures"], taxi["failures_recovered"]) == (1, 1, 1)
    assert taxi["mttr_s"] == pytest.approx(20.0)
    assert taxi["core_hours"] == pytest.approx((40000 * 1 + 46400 * 2) / 3600)        # 36.89

    assert web["observed_s"] == 43200 and web["measured_s"] == 43200
    assert web["share_within_rmax"] == pytest.approx((43200 - 3600) / 43200)          # 0.9167
    assert web["slo_met"] is False and web["slo_target"] == 0.99 and web["beta"] == 0.75
    assert web["availability"] == 1.0 and web["reconfigurations"] == 0 and web["failures"] == 0
    assert web["core_hours"] == pytest.approx(24.0)

    html = index.read_text()
    rows = dict(re.findall(r'<tr class="app-row" data-app="(\w+)">(.*?)</tr>', html, re.S))
    cells = {a: [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
             for a, r in rows.items()}
    assert cells["taxi"] == ["taxi", "met", "99.275 %", "99.0 %", "1,000 ms", "99.97 %", "600", "500 ms",
                             "99.970 %", "26.0 s", "6.0 s", "20.0 s", "1", "1 (1 recovered)", "20.0 s", "36.89"]
    assert cells["web"] == ["web", "missed", "91.667 %", "99.0 %", "1,500 ms", "100.00 %", "3,600", "1,600 ms",
                            "100.000 %", "0.0 s", "0.0 s", "0.0 s", "0", "0", "–", "24.00"]

    # one CSV per view, the day's rows
    for view in nightly.VIEWS:
        with (index.parent / f"{view}.csv").open() as f:
            got = list(csv.DictReader(f))
        assert {r["day"] for r in got} == {D.isoformat()}, view
    with (index.parent / "reconfigurations.csv").open() as f:
        (r,) = list(csv.DictReader(f))
    assert (r["app"], r["action"], float(r["downtime_s"])) == ("taxi", "scale_out", 6.0)
    # how often a change still needed an offline repartition (its stage outgrew its key groups)
    assert r["repartitioned"] == "True"
    assert "pause_resume (state repartitioned in 3.5 s)" in html
    assert "1 of 1 changes rewrote the state offline" in re.sub(r"\s+", " ", html)
    assert "no data-quality results recorded for 2024-03-10" in html


@pytest.mark.db
def test_one_app_and_data_quality_results(day_of_two_apps, tmp_path):
    _add_dq(day_of_two_apps, success=True)
    _add_dq(day_of_two_apps, success=False)  # a later run of the same suite: the one shown
    index = nightly.build_report(D, app="web", out_dir=tmp_path)
    assert index == tmp_path / D.isoformat() / "web" / "index.html"
    html = index.read_text()
    assert 'data-app="web"' in html and 'data-app="taxi"' not in html
    dq = re.search(r'<table id="dq">(.*?)</table>', html, re.S).group(1)
    assert "failed" in dq and "expect_column_values_to_be_between input_rps 3 rows &lt; 0" in dq
    assert dq.count("<tr>") == 2  # header + the latest result
    with day_of_two_apps.connect() as conn:
        rec = conn.execute(text("SELECT app, summary FROM reports")).one()
    assert rec.app == "web" and rec.summary["dq"] == {"results": 1, "failed": 1}
    with pytest.raises(ValueError, match="no app 'nope'"):
        nightly.build_report(D, app="nope", out_dir=tmp_path)


def test_a_nightly_run_reports_its_data_interval_day():
    from datetime import datetime

    utc = UTC
    # the scheduled run of 2026-11-22 00:15 has the data interval [11-21 00:15, 11-22 00:15)
    assert nightly.day_of_run(None, datetime(2026, 11, 21, 0, 15, tzinfo=utc),
                              datetime(2026, 11, 22, 0, 15, tzinfo=utc)) == date(2026, 11, 21)
    assert nightly.day_of_run(None, None, datetime(2026, 11, 22, 9, 0, tzinfo=utc)) == date(2026, 11, 21)
    assert nightly.day_of_run("2026-11-02", None, datetime(2026, 11, 22, tzinfo=utc)) == date(2026, 11, 2)


@pytest.mark.db
def test_empty_day_before_any_app_still_writes_a_page(day_of_two_apps, tmp_path):
    index = nightly.build_report(D - timedelta(days=400), out_dir=tmp_path)
    html = index.read_text()
    assert 'id="no-apps"' in html and "no data-quality results recorded" in html


@pytest.mark.db
def test_status_points_at_the_last_report(day_of_two_apps, tmp_path):
    from typer.testing import CliRunner

    from streamops.cli import app

    runner = CliRunner()
    before = runner.invoke(app, ["status"], env={"COLUMNS": "250"})
    assert before.exit_code == 0, before.output
    assert "last report: none yet" in before.output
    index = nightly.build_report(D, out_dir=tmp_path)
    after = runner.invoke(app, ["status"], env={"COLUMNS": "250"})
    assert after.exit_code == 0, after.output
    assert f"last report: {index}" in after.output.replace("\n", "") and f"day {D}" in after.output


@pytest.mark.db
def test_report_cli_writes_the_page(day_of_two_apps, tmp_path):
    from typer.testing import CliRunner

    from streamops.cli import app

    res = CliRunner().invoke(app, ["report", "--date", D.isoformat(), "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / D.isoformat() / "index.html").exists()
    assert "index.html" in res.output
    bad = CliRunner().invoke(app, ["report", "--date", "yesterday-ish"])
    assert bad.exit_code == 2 and "today or yesterday" in bad.output
    today = CliRunner().invoke(app, ["report", "--date", "today", "--out", str(tmp_path)])
    assert today.exit_code == 0, today.output
    assert (tmp_path / datetime.now(UTC).date().isoformat() / "index.html").exists()


@pytest.mark.db
def test_report_without_a_date_reports_today_when_yesterday_is_empty(clean_db, tmp_path):
    """A fresh demo has no yesterday: the default report is today's, and the command says why."""
    from typer.testing import CliRunner

    from streamops.cli import app

    res = CliRunner().invoke(app, ["report", "--out", str(tmp_path)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    today = datetime.now(UTC).date()
    assert "has no metrics: reporting today so far" in res.output
    assert (tmp_path / today.isoformat() / "index.html").exists()


@pytest.mark.db
def test_screenshot_in_headless_chromium(day_of_two_apps, tmp_path, artifacts):
    """The page renders in a real browser, fully: every chart image is loaded and decoded and has
    drawn content, the tables are there; then the screenshot is kept for a person to look at."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.browser import chrome, full_page, images_drawn

    t0 = time.monotonic()
    index = nightly.build_report(D, out_dir=tmp_path)
    build_s = time.monotonic() - t0
    html = index.read_text()
    assert html.count('<tr class="app-row"') == 2
    uris = re.findall(r'<img[^>]+src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(uris) == 4, "one chart per app, the downtime chart and the high-availability chart"
    assert "<link" not in html and "<script" not in html and "http" not in html.split("<body>")[1], "self-contained"

    shot = artifacts / "report-screenshot.png"
    shot.unlink(missing_ok=True)
    with chrome() as driver:
        driver.get(index.as_uri())
        WebDriverWait(driver, 30).until(images_drawn)
        charts = driver.find_elements(By.CSS_SELECTOR, "img.chart")
        assert len(charts) == 4
        for img in charts:
            assert img.size["width"] > 600 and img.size["height"] > 100, img.size
            pixels = np.asarray(Image.open(io.BytesIO(img.screenshot_as_png)).convert("RGB"))
            # drawn: lines, bars and text, not a blank or broken image
            assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50
            assert (pixels.sum(axis=2) < 600).mean() > 0.01
        rows = driver.find_elements(By.CSS_SELECTOR, "tr.app-row")
        assert len(rows) == 2 and all(r.is_displayed() for r in rows)
        full_page(driver, 1280)
        WebDriverWait(driver, 10).until(images_drawn)
        driver.save_screenshot(str(shot))
    shutil.copy(index, artifacts / "report-index.html")
    img = np.asarray(Image.open(shot).convert("RGB"))
    assert img.shape[1] == 1280 and len(np.unique(img.reshape(-1, 3), axis=0)) > 200
    print(f"report built in {build_s:.2f} s; screenshot {shot} ({shot.stat().st_size:,} bytes)")


def test_the_chart_line_breaks_across_a_long_gap_only():
    from datetime import datetime

    t0 = datetime(2026, 11, 21, tzinfo=UTC)
    pts = [{"bucket": b, "ts": t0 + timedelta(seconds=10 * b), "complete": True, "cores": 2}
           for b in (0, 1, 2, 3, 9, 10)]
    out = nightly._break_gaps(pts)
    assert [p["bucket"] for p in out] == [0, 1, 2, 3, 3, 9, 10]
    assert out[4]["complete"] is False and out[4]["ts"] == t0 + timedelta(seconds=40)
    assert out[4]["cores"] is None, "no cores drawn across the gap: nothing ran"
    # a stage with a 30 s trigger: a batch every third bucket is its usual spacing, not a gap
    slow = [{"bucket": b, "ts": t0 + timedelta(seconds=10 * b), "complete": True} for b in (0, 3, 6, 9)]
    assert nightly._break_gaps(slow) == slow


def test_a_response_peak_far_above_r_max_is_drawn_on_a_log_scale(monkeypatch):
    """A catch-up of minutes next to an R_max of seconds: on a linear axis R_max would sit on zero."""
    from datetime import datetime

    from streamops.report import charts

    scales = []
    real_png = charts._png
    monkeypatch.setattr(charts, "_png", lambda fig: scales.append(fig.axes[0].get_yscale()) or real_png(fig))
    t0 = datetime(2026, 11, 22, tzinfo=UTC)
    ts = [t0 + timedelta(seconds=10 * i) for i in range(4)]
    for peak, scale in ((9000.0, "linear"), (400_000.0, "log")):
        png = charts.response_chart("a", ts, [3000.0, peak, None, 3000.0], [3500.0, peak, None, 3500.0],
                                    [1, 2, None, 2], 8000, 0.75, [], [], title="t")
        assert png.startswith(b"\x89PNG")
        assert scales[-1] == scale


def test_a_cold_start_spike_is_clipped_so_the_steady_response_stays_readable(monkeypatch):
    """Issue 26: first batches of 37-55 s stretched the axis until a steady 5-7 s was a flat band."""
    from datetime import datetime

    from streamops.report import charts

    seen = []
    real_png = charts._png
    monkeypatch.setattr(charts, "_png", lambda fig: seen.append(fig.axes[0]) or real_png(fig))
    t0 = datetime(2026, 11, 22, tzinfo=UTC)
    ts = [t0 + timedelta(seconds=10 * i) for i in range(200)]
    resp = [55_000.0, 37_000.0] + [6000.0 + 500 * (i % 3) for i in range(198)]
    charts.response_chart("a", ts, resp, resp, [1] * 200, 5000, 0.75, [charts.Marker(ts[50], "scale_out", "1")], [],
                          title="t")
    top = seen[-1]
    assert top.get_yscale() == "linear" and top.get_ylim()[1] < 10_000, top.get_ylim()
    notes = [t.get_text() for t in top.texts]
    assert any("clipped: peak 55,000 ms at 00:00" in n for n in notes), notes
    assert top.title.get_text() == "" and top.get_title(loc="left") == "t"


@pytest.mark.db
def test_missed_nights_are_backfilled_oldest_first(clean_db, tmp_path, monkeypatch):
    """Nights with metrics but no report (the scheduler was down) are found; reported ones are not."""
    from datetime import date

    from sqlalchemy import text

    from streamops.report import nightly

    with clean_db.begin() as conn:
        conn.execute(text("SELECT ensure_stage_metrics_partitions(DATE '2026-10-01', 7)"))
        for d in ("2026-10-02", "2026-10-04", "2026-10-05"):
            conn.execute(text(
                "INSERT INTO stage_metrics (ts, stage_id, run_id, batch_id, input_rows, batch_duration_ms) "
                "VALUES (CAST(:d AS date) + interval '1 hour', 'x.s', 'r', 1, 1, 1)"), {"d": d})
        conn.execute(text("INSERT INTO reports (day, app, path) VALUES (DATE '2026-10-04', NULL, '/r')"))
    assert nightly.missed_days(date(2026, 10, 6), max_days=7) == [date(2026, 10, 2), date(2026, 10, 5)]
    assert nightly.missed_days(date(2026, 10, 6), max_days=2) == [date(2026, 10, 5)]


@pytest.mark.db
def test_a_scheduled_night_with_no_batch_writes_no_report(clean_db, tmp_path, monkeypatch):
    """A fresh install's first nightly run reports the day before any app ran: it used to write an
    empty report that said "missed" and became the linked last report (issue 48 item 13). A day a
    person asks for is written anyway."""
    from datetime import date

    from streamops.report import nightly

    monkeypatch.setenv("STREAMOPS_REPORTS_DIR", str(tmp_path))
    before = nightly.last_report()
    assert nightly.build_with_backfill(date(2026, 10, 6)) == []
    assert nightly.last_report() == before
    [index] = nightly.build_with_backfill(date(2026, 10, 6), asked=True)
    assert index.exists() and nightly.last_report()["day"] == date(2026, 10, 6)
