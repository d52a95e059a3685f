-- A batch's commit; refused (no row back) once the run is stale: the driver then exits.
INSERT INTO sink_commits (stage_id, deployment_id, batch_id, rows, committed_at)
SELECT :stage_id, :deployment_id, :batch_id, :rows, :committed_at
WHERE run_is_current(CAST(:deployment_id AS bigint))
ON CONFLICT DO NOTHING
RETURNING 1
