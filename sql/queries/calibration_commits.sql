-- The simulator's calibration: a stage's output commits in [from_ts, to_ts] (the output gaps).
SELECT committed_at, deployment_id, batch_id, rows
FROM sink_commits
WHERE stage_id = :stage_id
  AND committed_at >= CAST(:from_ts AS timestamptz) AND committed_at <= CAST(:to_ts AS timestamptz)
ORDER BY committed_at
