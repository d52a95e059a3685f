-- The checkpoint of each stage's latest run per role (primary, replica-N, an active backup's):
-- what a restart resumes, and what the checkpoint size (checkpoint_sizes) measures.
SELECT DISTINCT ON (stage_id, role) stage_id, role, checkpoint
FROM deployments WHERE status <> 'refused'
ORDER BY stage_id, role, started_at DESC, id DESC
