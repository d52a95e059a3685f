-- The driver records a failed batch as its replica's open failure (or adds an attempt to the one
-- already open, the watchdog's included: one open failure per stage and role).
INSERT INTO failures AS f (stage_id, app, deployment_id, role, kind, detail, failed_at, last_commit_at, attempts,
                           detected_by)
SELECT s.stage_id, s.app, :deployment_id,
       COALESCE((SELECT role FROM deployments WHERE id = CAST(:deployment_id AS bigint)), 'primary'),
       'batch_failed', :detail, now(),
       (SELECT max(committed_at) FROM sink_commits WHERE stage_id = s.stage_id), 1, 'driver'
FROM stages s WHERE s.stage_id = :stage_id
ON CONFLICT (stage_id, role) WHERE status = 'recovering' DO UPDATE SET
    attempts = f.attempts + 1, detail = EXCLUDED.detail
RETURNING id
