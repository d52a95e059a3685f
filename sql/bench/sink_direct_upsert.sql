-- bench/sink.py: the upsert each partition ran before staging (sql/queries/sink_upsert.sql, since
-- removed), psycopg2 execute_values.
INSERT INTO sink_outputs AS t (stage_id, key, value, event_ts, version, batch_id)
VALUES %s
ON CONFLICT (stage_id, key) DO UPDATE
    SET value = EXCLUDED.value, event_ts = EXCLUDED.event_ts, version = EXCLUDED.version,
        batch_id = EXCLUDED.batch_id, written_at = now()
    WHERE t.version <= EXCLUDED.version
