"""The streamops page in the Airflow UI (a plugin: fastapi_apps + external_views)."""
