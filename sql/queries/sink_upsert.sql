-- Idempotent sink write (psycopg2 execute_values fills the VALUES list). An older version (late
-- replica, stale replay) never wins. An equal version does: in a correct run it carries the same
-- value, and after a rollback it is the old configuration's replay replacing what the rejected
-- run wrote.
INSERT INTO sink_outputs AS t (stage_id, key, value, event_ts, version, batch_id)
VALUES %s
ON CONFLICT (stage_id, key) DO UPDATE
    SET value = EXCLUDED.value, event_ts = EXCLUDED.event_ts, version = EXCLUDED.version,
        batch_id = EXCLUDED.batch_id, written_at = now()
    WHERE t.version <= EXCLUDED.version
