"""Airflow's side of streamops: the Airflow installation it runs (`airflow_home`), the work each
DAG task does (`tasks`), and a small REST client (`rest`). DAG files in `dags/` call `tasks`."""
