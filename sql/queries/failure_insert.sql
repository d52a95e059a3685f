-- A failure the watchdog found, written before it acts (persist first, then act).
INSERT INTO failures (stage_id, app, deployment_id, kind, detail, failed_at, last_commit_at)
VALUES (:stage_id, :app, :deployment_id, :kind, :detail, :failed_at, :last_commit_at)
RETURNING id
