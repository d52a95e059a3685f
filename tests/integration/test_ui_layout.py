"""The Streams page fits the Airflow frame (issue 48 item 13): in a 1280 px wide browser the
Airflow UI frames the page at about 1 200 px, and the table was wider than that, so hibench's
Run button was cut off. The page is rendered here as the plugin renders it, with the long cells
a real demo has (a change's reason, DAG run links, a failure), and drawn by headless Chromium
in a frame that wide: every row's Run button must be inside the frame, and on top (clickable).
(Before: hibench's ended at 1 858 px in a 1 180 px frame.)"""

from __future__ import annotations

from datetime import UTC, datetime

from streamops.ui import views

NOW = datetime(2026, 11, 27, 19, 40, tzinfo=UTC)
FRAME_PX = 1180  # a 1280 px window less Airflow's navigation bar (the real frame measured 1 208 px): with margin


def _status(sid: str) -> dict:
    return {"stage_id": sid, "status": "running", "health": "ok", "cores": 2, "partitions": 4, "executors": 2,
            "latency_p95_ms": 4321.0, "in_rps": 1234.0, "backlog_files": 12, "backlog_rows": None,
            "quarantine_backlog_files": 0, "heartbeat_age_s": 2.0, "live_replicas": 1, "replicas": 1, "leader": None,
            "plan": "scale_in→1 pending",
            "last_change": "scale_out 1→2 live done 19:09",
            "last_change_reason": "ds2: busy fraction 0.93 over the last 5 windows, n*=2 at the observed input rate "
                                  "of 1 234 records/s with a backlog of 12 files",
            "quarantined": 1902, "ui_url": "http://127.0.0.1:4041"}


def _page() -> str:
    from streamops.ui.app import _templates

    failure = {"kind": "master_lost", "role": "primary", "status": "recovered", "detected_at": NOW,
               "mttr_ms": 20123.0}
    runs = [{"dag_id": d, "dag_run_id": f"manual__2026-11-27T19:{m:02d}:14.482391+00:00", "state": "success",
             "run_after": f"2026-11-27T19:{m:02d}:14Z"}
            for d, m in (("streamops_reconfigure", 34), ("streamops_deploy", 5), ("streamops_reconfigure", 9))]
    apps = [views.AppView(app=app, r_max_ms=5000, failures_24h=3, failures_open=0, downtime_24h_s=12.3,
                          slo=views.slo([], 5000), series=[],
                          stages=[views.StageView(_status(sid), failure, runs)])
            for app, sid in (("hibench", "hibench.wordcount"), ("taxi", "taxi.top10"),
                             ("clicks", "clicks.sessions_by_user_and_region"))]
    return _templates.get_template("streams.html.j2").render(
        apps=apps, report={"day": "2026-11-27", "app": None}, prefix="/streamops", user="admin",
        may_reconfigure=True, may_deploy=True, actions=["scale_out", "scale_in", "migrate", "upgrade"],
        pools=["local", "cluster", "cluster-big"], now=NOW)


def test_every_run_button_is_inside_a_1280_px_airflow_frame(tmp_path):
    from selenium.webdriver.common.by import By

    from tests.browser import chrome

    page = tmp_path / "streams.html"
    page.write_text(_page())
    outer = tmp_path / "frame.html"
    outer.write_text(f'<!doctype html><body style="margin:0"><iframe src="{page.name}" '
                     f'style="width:{FRAME_PX}px;height:1400px;border:0"></iframe></body>')
    with chrome(width=1280, height=1500) as driver:
        driver.get(outer.as_uri())
        driver.switch_to.frame(driver.find_element(By.CSS_SELECTOR, "iframe"))
        buttons = driver.find_elements(By.CSS_SELECTOR, "form.reconfigure button")
        assert len(buttons) == 3
        seen = driver.execute_script("""
            return arguments[0].map(b => {
              const r = b.getBoundingClientRect(), x = r.left + r.width / 2, y = r.top + r.height / 2;
              const top = document.elementFromPoint(x, y);
              const box = b.closest('.scroll');
              return [b.closest('tr').dataset.stage, Math.round(r.right), window.innerWidth,
                      top === b || b.contains(top), box.scrollWidth - box.clientWidth];
            });""", buttons)
    for stage, right, width, on_top, overflow in seen:
        assert right <= width, f"{stage}: its Run button ends at {right} px, past the {width} px frame"
        assert on_top, f"{stage}: its Run button is covered"
        # The demo's stages fit whole; an id as long as the third scrolls its table, the
        # actions column staying in view (sticky) at the frame's right edge.
        assert overflow <= 0 or stage.startswith("clicks."), f"{stage}: its table is {overflow} px too wide"
