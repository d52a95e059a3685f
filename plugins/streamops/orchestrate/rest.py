"""A small client of Airflow 3's REST API (v2): token, trigger, poll. `make demo` deploys through
it and the end-to-end test drives Airflow with it, exactly as an operator's script would."""

from __future__ import annotations

import json
from typing import Any

import httpx

from streamops.waiting import wait_until


class AirflowAPIError(RuntimeError):
    def __init__(self, status: int, detail: Any, what: str):
        super().__init__(f"{what}: HTTP {status}: {detail}")
        self.status, self.detail = status, detail


class AirflowClient:
    def __init__(self, base_url: str, username: str, password: str, timeout: float = 30.0):
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout)
        r = self._http.post("/auth/token", json={"username": username, "password": password})
        if r.status_code not in (200, 201):
            raise AirflowAPIError(r.status_code, _detail(r), f"login as {username}")
        self._http.headers["Authorization"] = f"Bearer {r.json()['access_token']}"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AirflowClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method: str, path: str, what: str, **kw) -> Any:
        r = self._http.request(method, f"/api/v2{path}", **kw)
        if r.status_code >= 400:
            raise AirflowAPIError(r.status_code, _detail(r), what)
        return r.json() if r.content else None

    def dag_ids(self) -> list[str]:
        return [d["dag_id"] for d in self._call("GET", "/dags", "list DAGs", params={"limit": 100})["dags"]]

    def wait_for_dags(self, dag_ids: list[str], timeout_s: float = 180) -> None:
        """The dag-processor parses files asynchronously: wait until every id is known."""
        if not wait_until(lambda: not set(dag_ids) - set(self.dag_ids()), timeout_s, interval_s=2):
            raise TimeoutError(f"DAGs not parsed within {timeout_s:.0f}s: {sorted(set(dag_ids) - set(self.dag_ids()))}")

    def unpause(self, dag_id: str) -> None:
        self._call("PATCH", f"/dags/{dag_id}", f"unpause {dag_id}", json={"is_paused": False})

    def trigger(self, dag_id: str, conf: dict | None = None) -> dict:
        """A manual run now. Airflow validates `conf` against the DAG's Params (HTTP 400 if not)."""
        return self._call("POST", f"/dags/{dag_id}/dagRuns", f"trigger {dag_id}",
                          json={"logical_date": None, "conf": conf or {}})

    def dag_run(self, dag_id: str, run_id: str) -> dict:
        return self._call("GET", f"/dags/{dag_id}/dagRuns/{run_id}", f"get run {run_id}")

    def dag_runs(self, dag_id: str, limit: int = 50) -> list[dict]:
        return self._call("GET", f"/dags/{dag_id}/dagRuns", f"list runs of {dag_id}",
                          params={"limit": limit, "order_by": "-start_date"})["dag_runs"]

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        tasks: list[dict] = self._call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances",
                                       f"tasks of {run_id}")["task_instances"]
        return tasks

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        """A task's log as text (what the UI's log view shows)."""
        doc = self._call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
                         f"log of {task_id}", params={"full_content": True})
        content = doc.get("content", "")
        if isinstance(content, list):  # structured log lines
            return "\n".join(_log_line(c) for c in content)
        return str(content)

    def failure(self, dag_id: str, run_id: str) -> str | None:
        """Why a run failed: its first failed task and that task's exception ("task: Type: message"),
        as the end of the task's log in the UI shows it; None when no task failed."""
        failed = [t for t in self.task_instances(dag_id, run_id) if t.get("state") == "failed"]
        if not failed:
            return None
        t = failed[0]
        doc = self._call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{t['task_id']}/logs/"
                                f"{t.get('try_number') or 1}", f"log of {t['task_id']}", params={"full_content": True})
        content = doc.get("content", "")
        lines = content if isinstance(content, list) else str(content).splitlines()
        for line in reversed(lines):  # a structured line's exception is in error_detail
            detail = line.get("error_detail") if isinstance(line, dict) else None
            if detail:
                exc = detail[-1]
                return f"{t['task_id']}: {exc.get('exc_type')}: {exc.get('exc_value')}"
        text = [_log_line(x) for x in lines if "Error" in _log_line(x) or "Exception" in _log_line(x)]
        return f"{t['task_id']}: {text[-1][:500]}" if text else f"{t['task_id']} failed (no error in its log)"

    def wait(self, dag_id: str, run_id: str, timeout_s: float = 600, progress=lambda _: None) -> dict:
        """Poll until the run is finished; returns it (state success or failed)."""
        seen = {"state": None}

        def finished() -> dict | None:
            run = self.dag_run(dag_id, run_id)
            if run["state"] != seen["state"]:
                progress(f"{dag_id} {run_id}: {run['state']}")
                seen["state"] = run["state"]
            return run if run["state"] in ("success", "failed") else None

        run = wait_until(finished, timeout_s, interval_s=2)
        if run is None:
            raise TimeoutError(f"{dag_id} run {run_id} still {seen['state']} after {timeout_s:.0f}s")
        return run


def _log_line(line: Any) -> str:
    """One structured log line as text: its event, then its other fields (a failure's traceback and
    exception message are in `error_detail`, not in the event)."""
    if not isinstance(line, dict):
        return str(line)
    rest = {k: v for k, v in line.items() if k not in ("event", "timestamp", "level", "logger")}
    return " ".join([str(line.get("event", "")), json.dumps(rest, default=str) if rest else ""]).strip()


def _detail(r: httpx.Response) -> Any:
    try:
        return r.json().get("detail", r.text)
    except ValueError:
        return r.text
