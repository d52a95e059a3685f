-- A failed batch: count it. The same error again adds one; a different error, or the same batch
-- id holding other files (a new checkpoint), starts the count over. Returns the count.
INSERT INTO batch_failures AS b (stage_id, role, query, batch_id, files, error, attempts, deployment_id)
VALUES (:stage_id, :role, :query, :batch_id, CAST(:files AS text[]), :error, 1, :deployment_id)
ON CONFLICT (stage_id, role, query, batch_id) DO UPDATE SET
    attempts = CASE WHEN b.error = EXCLUDED.error AND b.files = EXCLUDED.files AND b.status = 'retrying'
                    THEN b.attempts + 1 ELSE 1 END,
    error = EXCLUDED.error, files = EXCLUDED.files, deployment_id = EXCLUDED.deployment_id,
    last_failed_at = now(),
    first_failed_at = CASE WHEN b.error = EXCLUDED.error AND b.files = EXCLUDED.files AND b.status = 'retrying'
                           THEN b.first_failed_at ELSE now() END,
    status = 'retrying', quarantined_rows = NULL, quarantined_at = NULL
RETURNING attempts
