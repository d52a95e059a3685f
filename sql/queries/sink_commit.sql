-- A batch's commit; refused (no row back) once the run is stale: the driver then exits.
INSERT INTO sink_commits (stage_id, deployment_id, batch_id, rows, committed_at)
SELECT :stage_id, :deployment_id, :batch_id, :rows, :committed_at
WHERE run_is_current(:deployment_id)
ON CONFLICT DO NOTHING
RETURNING 1
