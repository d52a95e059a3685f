-- A run's first output commit (after `after`, when given: a live change's first batch).
SELECT min(committed_at) FROM sink_commits
WHERE deployment_id = :deployment_id AND (CAST(:after AS timestamptz) IS NULL OR committed_at > CAST(:after AS timestamptz))
