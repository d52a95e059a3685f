"""The Streams page's pure parts: the sparkline SVG, the SLO figures and which DAG runs a stage's
row links to. The page itself runs in a real Airflow in tests/system/test_airflow.py."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from markupsafe import escape

from streamops.ui import charts, views

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
SVG = "{http://www.w3.org/2000/svg}"


def _series(values):
    return [(NOW - timedelta(minutes=len(values) - i), float(v)) for i, v in enumerate(values)]


def test_sparkline_marks_minutes_above_r_max_and_has_a_size():
    svg = ET.fromstring(charts.sparkline_svg(_series([800, 900, 2500, 700]), r_max_ms=1000, now=NOW))
    assert (svg.get("width"), svg.get("height")) == ("260", "56")  # an <img> of it has a natural size
    assert len(svg.findall(f"{SVG}circle")) == 1, "one minute above R_max, one red dot"
    line = svg.find(f"{SVG}polyline").get("points").split()
    xs = [float(p.split(",")[0]) for p in line]
    assert xs == sorted(xs) and xs[0] >= 0 and xs[-1] <= 260, "time runs left to right inside the box"
    assert svg.find(f"{SVG}line").find(f"{SVG}title").text == "R_max 1,000 ms"


def test_one_huge_minute_does_not_flatten_the_rest():
    """An old backlog's minute (an hour of latency) is drawn at the top edge: the scale ends at
    3 × R_max, so the minutes around R_max stay apart."""
    svg = ET.fromstring(charts.sparkline_svg(_series([900, 3_600_000, 1100]), r_max_ms=1000, now=NOW))
    ys = [float(p.split(",")[1]) for p in svg.find(f"{SVG}polyline").get("points").split()]
    assert min(ys) == 4.0, "the huge minute sits at the top edge, inside the image"
    assert ys[0] - ys[2] > 2, "900 and 1100 ms are still apart"
    assert "3,600,000 ms" in svg.findall(f"{SVG}circle")[0].find(f"{SVG}title").text


def test_sparkline_of_an_idle_hour_says_so():
    svg = ET.fromstring(charts.sparkline_svg([], r_max_ms=5000, now=NOW))
    assert svg.find(f"{SVG}text").text == "no input in the last hour"
    assert svg.find(f"{SVG}polyline") is None


def test_slo_counts_minutes_within_r_max():
    s = views.slo(_series([100, 200, 1200, 300]), r_max_ms=1000)
    assert (s.minutes, s.within, s.worst_ms, s.share_within) == (4, 3, 1200.0, 0.75)
    assert views.slo([], 1000).share_within is None


def _app(app: str, sids: list[str]) -> views.AppView:
    return views.AppView(app=app, r_max_ms=1000, failures_24h=0, failures_open=0, downtime_24h_s=0.0,
                         slo=views.slo([], 1000), series=[],
                         stages=[views.StageView({"stage_id": s, "heartbeat_age_s": Decimal("1.5")}, None)
                                 for s in sids])


def test_a_stage_links_the_runs_that_changed_it_newest_first():
    apps = [_app("a", ["a.x", "a.y"]), _app("b", ["b.x"])]
    runs = {"streamops_reconfigure": [
                {"dag_run_id": "r1", "run_after": "2026-11-27T10:00:00Z", "conf": {"stage": "a.x"}},
                {"dag_run_id": "r2", "run_after": "2026-11-27T11:00:00Z", "conf": {"stage": "b.x"}},
                {"dag_run_id": "r3", "run_after": "2026-11-27T09:00:00Z", "conf": None}],
            "streamops_deploy": [{"dag_run_id": "d1", "run_after": "2026-11-27T10:30:00Z", "conf": {"app": "a"}}]}
    views.attach_runs(apps, runs)
    got = {s.status["stage_id"]: [r["dag_run_id"] for r in s.runs] for a in apps for s in a.stages}
    assert got == {"a.x": ["d1", "r1"], "a.y": ["d1"], "b.x": ["r2"]}
    assert apps[0].stages[0].runs[0]["dag_id"] == "streamops_deploy"


def test_the_json_model_is_plain():
    doc = views.as_json([_app("a", ["a.x"])])
    assert doc["apps"][0]["stages"][0]["status"]["heartbeat_age_s"] == 1.5  # Decimal → number
    assert doc["apps"][0]["slo"]["share_within"] is None


def _hostile(field: str) -> str:
    """A value that breaks out of an element or a quoted attribute unless it is escaped."""
    return f"{field}\"><img src=x onerror=alert(1)>' onmouseover='x"


def test_the_page_escapes_every_value_it_shows():
    """Stage ids, failure details, plans, pools, run ids and URLs come from the registry, the
    database and Airflow: rendered as text, never as markup (a `.html.j2` template too)."""
    from streamops.ui.app import _templates

    fields = ["user", "report_day", "report_app", "app", "stage_id", "status", "cores", "partitions",
              "executors", "plan", "quarantined", "live_replicas", "leader", "kind", "role", "failure_status",
              "ui_url", "dag_id", "dag_run_id", "state", "action", "pool"]
    h = {f: _hostile(f) for f in fields}

    def status(stage_id: str, state: str) -> dict:
        return {"stage_id": stage_id, "status": state, "health": "ok", "cores": h["cores"],
                "partitions": h["partitions"], "executors": h["executors"], "latency_p95_ms": None,
                "in_rps": None, "backlog_files": 3, "quarantine_backlog_files": 0, "heartbeat_age_s": 2.0,
                "live_replicas": h["live_replicas"], "replicas": 2, "leader": h["leader"], "plan": h["plan"],
                "quarantined": h["quarantined"], "ui_url": h["ui_url"]}

    failure = {"kind": h["kind"], "role": h["role"], "status": h["failure_status"], "detected_at": NOW,
               "mttr_ms": None}
    run = {"dag_id": h["dag_id"], "dag_run_id": h["dag_run_id"], "state": h["state"],
           "run_after": "2026-" + h["dag_id"]}
    app = views.AppView(app=h["app"], r_max_ms=1000, failures_24h=1, failures_open=1, downtime_24h_s=0.0,
                        slo=views.slo([], 1000), series=[],
                        stages=[views.StageView(status(h["stage_id"], h["status"]), failure, [run]),
                                views.StageView(status("a.running", "running"), None)])
    html = _templates.get_template("streams.html.j2").render(
        apps=[app], report={"day": h["report_day"], "app": h["report_app"]}, prefix="/streamops", user=h["user"],
        may_reconfigure=True, may_deploy=True, actions=[h["action"]], pools=[h["pool"]], now=NOW)
    for field, value in h.items():
        assert value not in html, f"{field} is rendered as markup"
        assert str(escape(value)) in html, f"{field} is not on the page, escaped"
    assert "<img src=x" not in html and "' onmouseover='" not in html
