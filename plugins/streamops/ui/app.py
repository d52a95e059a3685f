"""The streamops page inside the Airflow UI: a FastAPI app that Airflow's api-server mounts at
/streamops (streamops.ui.plugin). Airflow does not protect a plugin's endpoints, so every route
here resolves the caller's Airflow token (the UI's `_token` cookie, or a Bearer header) with
Airflow's own `get_user`, and asks Airflow's auth manager what the user may do: read the
stages if they may read the streamops DAGs' runs, trigger a DAG if they may create its runs
(Simple auth manager: viewer reads; user, op and admin trigger). A trigger is forwarded to
Airflow's REST API with the caller's token, so it passes the same Params validation as the form.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import httpx
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.security import HTTPAuthorizationCredentials
from jinja2 import Environment, PackageLoader
from markupsafe import escape
from starlette.concurrency import run_in_threadpool

from streamops import registry
from streamops.store import db, observe
from streamops.ui import charts, views

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.models.base_user import BaseUser

log = logging.getLogger("streamops.ui")
T = TypeVar("T")

DEPLOY, RECONFIGURE = "streamops_deploy", "streamops_reconfigure"
TRIGGERABLE = (RECONFIGURE, DEPLOY)
PREFIX = "/streamops"  # where the plugin mounts this app (and the page's links start)

app = FastAPI(title="streamops", docs_url=None, redoc_url=None, openapi_url=None)
# Every template escaped, whatever its name: select_autoescape() goes by extension and passed
# `.html.j2` through raw, so a stage id or a failure detail was markup on the page.
_templates = Environment(loader=PackageLoader("streamops.ui", "templates"), autoescape=True)


# -- who is calling, and what they may do ------------------------------------------------------
def _bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else None


def _token(request: Request) -> str | None:
    """The caller's token, to call Airflow's API as them: the Bearer header, else the UI's cookie."""
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

    return _bearer(request) or request.cookies.get(COOKIE_NAME_JWT_TOKEN)


async def _caller(request: Request) -> BaseUser:
    """Airflow's own resolution of the caller (Bearer header first, else the UI's cookie): 401
    without a token, 401 for an expired one, 403 for a forged one."""
    from airflow.api_fastapi.core_api.security import get_user

    token = _bearer(request)
    return await get_user(request, None, HTTPAuthorizationCredentials(scheme="Bearer", credentials=token)
                          if token else None)


def _may(user: BaseUser, method: Literal["GET", "POST"], dag_id: str) -> bool:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    return get_auth_manager().is_authorized_dag(method=method, access_entity=DagAccessEntity.RUN,
                                                details=DagDetails(id=dag_id), user=user)


async def _reader(request: Request) -> BaseUser:
    user = await _caller(request)
    if not _may(user, "GET", DEPLOY):
        raise HTTPException(403, "reading streamops needs read access to the streamops DAGs' runs")
    return user


# -- reading -----------------------------------------------------------------------------------
def _airflow_url(request: Request) -> str:
    """Airflow's own address for calls made on the caller's behalf: [api] base_url, else this
    request's origin."""
    from airflow.configuration import conf

    base = conf.get("api", "base_url", fallback="") or ""
    return base.rstrip("/") if base.startswith("http") else f"{request.url.scheme}://{request.url.netloc}"


async def _runs(request: Request) -> dict[str, list[dict[str, Any]]]:
    """The latest runs of the two DAGs that change stages, read as the caller (their permissions)."""
    out: dict[str, list[dict[str, Any]]] = {}
    async with httpx.AsyncClient(base_url=_airflow_url(request), timeout=10,
                                 headers={"Authorization": f"Bearer {_token(request)}"}) as client:
        for dag_id in TRIGGERABLE:
            try:
                r = await client.get(f"/api/v2/dags/{dag_id}/dagRuns",
                                     params={"limit": 100, "order_by": "-run_after"})
                if r.status_code == 200:
                    out[dag_id] = r.json()["dag_runs"]
                elif r.status_code != 404:  # 404: the DAG is not parsed yet
                    log.warning("action=read-runs dag=%s HTTP %s: %s", dag_id, r.status_code, r.text[:200])
            except httpx.HTTPError as e:
                log.warning("action=read-runs dag=%s failed: %s", dag_id, e)
    return out


def _database_down(e: BaseException) -> HTTPException:
    """503 naming what happened and the limit that ran out (store/observe.py's page limits)."""
    what = observe.reason(e)
    driver_error = getattr(e, "orig", None) or e
    limit = {"55P03": f"a table it reads is locked: lock_timeout {observe.timeout_s():g} s",
             "57014": f"statement_timeout {observe.page_timeout_s():g} s"}.get(getattr(driver_error, "pgcode", ""))
    log.warning("action=read-streams the database is not answering: %s%s", what, f" ({limit})" if limit else "")
    return HTTPException(503, f"PostgreSQL is not answering ({type(driver_error).__name__}: {what}"
                              f"{f'; {limit}' if limit else ''}); the page comes back with it")


async def _read(read: Callable[[], T]) -> T:
    """`read()` in a worker thread, with the page's deadline (STREAMOPS_PAGE_TIMEOUT_S): 503 with
    the reason when the database does not answer (a locked table within the lock timeout, a
    stalled server within the deadline), never a request that hangs. A read does only reads: the
    first page load once imported report.nightly (and matplotlib) here, seconds on a loaded
    machine, and answered 503 with no rows (2026-11-27's clean-clone run)."""
    try:
        return await run_in_threadpool(observe.within, read, observe.page_timeout_s())
    except (db.DatabaseUnavailable, *observe.NOT_ANSWERING) as e:
        raise _database_down(e) from e


async def _streams(request: Request) -> list[views.AppView]:
    apps = await _read(views.streams)
    views.attach_runs(apps, await _runs(request))
    return apps


def _last_report() -> dict[str, Any] | None:
    """The newest `reports` row (report.nightly.last_report's query), read here: that module
    imports matplotlib (report/charts.py), which is no part of a read under the deadline."""
    with db.connection(observe.page_engine()) as conn:
        row = conn.execute(db.query("report_last")).first()
    return dict(row._mapping) if row else None


def _page_down(detail: str) -> HTMLResponse:
    """The page's own 503: the reason, and a reload every 15 s like the page's, so that it comes
    back with the database by itself (a JSON 503 in Airflow's frame stayed until a manual reload)."""
    return HTMLResponse(f'<!doctype html><meta http-equiv="refresh" content="15"><title>streamops</title>'
                        f'<p id="database-down">{escape(detail)}</p>', status_code=503)


@app.get("/", response_class=HTMLResponse)
async def page(request: Request) -> Response:
    try:
        user = await _reader(request)
    except HTTPException as e:
        if e.status_code != 401:
            raise
        from airflow.api_fastapi.app import get_auth_manager

        return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)))
    try:
        apps = await _streams(request)
        report = await _read(_last_report)
    except HTTPException as e:
        if e.status_code != 503:
            raise
        return _page_down(e.detail)
    try:
        pools = sorted((await run_in_threadpool(registry.load)).pools)
    except registry.RegistryError as e:  # the page still shows the stages; the DAG's form says what is wrong
        log.warning("action=read-registry apps.yaml does not load: %s", e)
        pools = sorted({s.status["pool"] for a in apps for s in a.stages if s.status.get("pool")})
    from streamops.orchestrate.tasks import ACTIONS

    html = _templates.get_template("streams.html.j2").render(
        apps=apps, report=report, prefix=PREFIX, user=user.get_name(),
        may_reconfigure=_may(user, "POST", RECONFIGURE), may_deploy=_may(user, "POST", DEPLOY),
        actions=ACTIONS, pools=pools, now=datetime.now(UTC))
    return HTMLResponse(html)


@app.get("/api/streams")
async def streams_json(request: Request) -> JSONResponse:
    await _reader(request)
    return JSONResponse(views.as_json(await _streams(request)))


@app.get("/charts/{app_name}.svg")
async def sparkline(app_name: str, request: Request) -> Response:
    await _reader(request)
    bounds, series = await _read(lambda: (views.r_max_ms(), views.response_series()))
    if app_name not in bounds:
        raise HTTPException(404, f"no app {app_name!r}")
    svg = charts.sparkline_svg(series.get(app_name, []), bounds[app_name], now=datetime.now(UTC))
    return Response(svg, media_type="image/svg+xml", headers={"Cache-Control": "no-store"})


@app.get("/reports/latest")
async def latest_report(request: Request) -> Response:
    await _reader(request)
    r = await _read(_last_report)
    if r is None:
        raise HTTPException(404, "no report yet: `streamops report`, or the streamops_nightly_report DAG, writes one")
    return RedirectResponse(f"{PREFIX}/reports/{r['id']}/{Path(r['path']).name}")


@app.get("/reports/{report_id}/{name}")
async def report_file(report_id: int, name: str, request: Request) -> Response:
    """A file of a written report (its index.html, or a CSV beside it), never outside its folder."""
    await _reader(request)
    row = await _read(lambda: views.report_row(report_id))
    if row is None:
        raise HTTPException(404, f"no report {report_id}")
    folder = Path(row.path).parent
    path = folder / name
    if "/" in name or name.startswith(".") or not path.is_file() or path.resolve().parent != folder.resolve():
        raise HTTPException(404, f"no file {name!r} in report {report_id}")
    return FileResponse(path)


# -- acting ------------------------------------------------------------------------------------
@app.post("/api/trigger/{dag_id}")
async def trigger(dag_id: str, request: Request) -> JSONResponse:
    """Trigger `dag_id` with the JSON body as its conf, through Airflow's REST API as the caller.
    Only JSON is accepted: a cross-site form cannot send it, so the UI's cookie cannot be used
    to trigger from another site."""
    if dag_id not in TRIGGERABLE:
        raise HTTPException(404, f"the page triggers only {', '.join(TRIGGERABLE)}")
    user = await _caller(request)
    if not _may(user, "POST", dag_id):
        log.warning("action=trigger dag=%s refused for user %s: not allowed to run it", dag_id, user.get_name())
        raise HTTPException(403, f"{user.get_name()} may not trigger {dag_id}")
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise HTTPException(415, "send the conf as application/json")
    conf = await request.json()
    if not isinstance(conf, dict):
        raise HTTPException(400, "the conf must be a JSON object")
    async with httpx.AsyncClient(base_url=_airflow_url(request), timeout=30) as client:
        r = await client.post(f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf},
                              headers={"Authorization": f"Bearer {_token(request)}"})
    body = r.json() if r.content else {}
    if r.status_code >= 400:
        log.warning("action=trigger dag=%s conf=%s refused by Airflow: HTTP %s %s", dag_id, conf, r.status_code,
                    body.get("detail", body))
        return JSONResponse({"detail": body.get("detail", body)}, status_code=r.status_code)
    log.info("action=trigger dag=%s run=%s conf=%s by %s", dag_id, body.get("dag_run_id"), conf, user.get_name())
    return JSONResponse({"dag_id": dag_id, "dag_run_id": body.get("dag_run_id"), "state": body.get("state"),
                         "url": f"/dags/{dag_id}/runs/{body.get('dag_run_id')}"}, status_code=200)
