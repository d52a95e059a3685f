-- A batch's commit. A replay of it by the same run (a query restarted in the driver) finds its
-- row and returns it unchanged; a stale run (fenced) gets no row back, and its driver exits.
INSERT INTO sink_commits AS c (stage_id, deployment_id, batch_id, rows, committed_at)
SELECT :stage_id, :deployment_id, :batch_id, :rows, :committed_at
WHERE run_is_current(CAST(:deployment_id AS bigint))
ON CONFLICT (stage_id, deployment_id, batch_id) DO UPDATE SET rows = c.rows
RETURNING 1
