-- Malformed records; the key makes a replayed batch add nothing (psycopg2 execute_values).
INSERT INTO quarantine (stage_id, deployment_id, batch_id, source_file, record_key, raw, reason)
VALUES %s
ON CONFLICT (stage_id, record_key) DO NOTHING
