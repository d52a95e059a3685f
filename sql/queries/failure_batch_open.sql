-- The driver records a failed batch as the stage's open failure (or adds an attempt to the one
-- already open, the watchdog's included: one open failure per stage).
INSERT INTO failures AS f (stage_id, app, deployment_id, kind, detail, failed_at, last_commit_at, attempts)
SELECT s.stage_id, s.app, :deployment_id, 'batch_failed', :detail, now(),
       (SELECT max(committed_at) FROM sink_commits WHERE stage_id = s.stage_id), 1
FROM stages s WHERE s.stage_id = :stage_id
ON CONFLICT (stage_id) WHERE status = 'recovering' DO UPDATE SET
    attempts = f.attempts + 1, detail = EXCLUDED.detail
RETURNING id
