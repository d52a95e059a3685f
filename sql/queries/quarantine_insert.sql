-- Records that are not records; the key makes a replayed batch add nothing (psycopg2 execute_values).
INSERT INTO quarantine (stage_id, deployment_id, batch_id, source_file, record_key, raw, raw_bytes, raw_size,
                        reason_kind, reason)
VALUES %s
ON CONFLICT (stage_id, record_key) DO NOTHING
