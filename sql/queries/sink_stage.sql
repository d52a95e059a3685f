-- A batch's sink rows, staged by the executors (psycopg2 execute_values fills the VALUES list).
INSERT INTO sink_staging (stage_id, deployment_id, batch_id, key, value, event_ts, version)
VALUES %s
