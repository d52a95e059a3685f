INSERT INTO sink_commits (stage_id, deployment_id, batch_id, rows, committed_at)
VALUES (:stage_id, :deployment_id, :batch_id, :rows, :committed_at)
ON CONFLICT DO NOTHING
