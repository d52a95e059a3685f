-- quarantine_insert with a row back per line that was new: the driver's whole-batch quarantine
-- counts what it added (psycopg2 execute_values, fetch).
INSERT INTO quarantine (stage_id, deployment_id, batch_id, source_file, record_key, raw, raw_bytes, raw_size,
                        reason_kind, reason)
VALUES %s
ON CONFLICT (stage_id, record_key) DO NOTHING
RETURNING 1
