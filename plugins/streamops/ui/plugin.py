"""The Airflow plugin: the page's FastAPI app mounted at /streamops, and a "Streams" entry in the
navigation that shows it inside the Airflow UI. Registered as the `airflow.plugins` entry point
(pyproject.toml), so Airflow finds it in the installed package; the plugins folder is not used,
because Airflow imports every .py file there and streamops's modules are not plugins."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from streamops.ui.app import PREFIX, app


class StreamopsPlugin(AirflowPlugin):
    name = "streamops"
    fastapi_apps = [{"app": app, "url_prefix": PREFIX, "name": "streamops"}]
    # url_route: the UI frames `href` at /plugin/streams, in its own layout and navigation.
    external_views = [{"name": "Streams", "href": f"{PREFIX.lstrip('/')}/", "url_route": "streams",
                       "destination": "nav"}]
