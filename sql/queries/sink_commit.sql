-- A batch's commit. A replay of it by the same run (a query restarted in the driver) finds its
-- row and returns it unchanged; a stale run (fenced) gets no row back, and its driver exits.
-- committed_at is the database's clock at this statement (clock_timestamp(): after the batch's
-- apply in the same transaction), never the driver's: MTTR and output gaps compare it with times
-- other processes wrote (docs/ha.md, "Clocks"). The row's time comes back: a replay's is the first.
INSERT INTO sink_commits AS c (stage_id, deployment_id, batch_id, rows, committed_at)
SELECT :stage_id, :deployment_id, :batch_id, :rows, clock_timestamp()
WHERE run_is_current(CAST(:deployment_id AS bigint))
ON CONFLICT (stage_id, deployment_id, batch_id) DO UPDATE SET rows = c.rows
RETURNING c.committed_at
