-- Every checkpoint path something may still need: the latest run of each stage and role (a restart
-- resumes it), every live run, a staged copy that is ready, and any checkpoint of a stage whose
-- reconfiguration is pending or running (its rollback copy and the checkpoint it switches from).
SELECT checkpoint AS path FROM (
    SELECT DISTINCT ON (stage_id, role) checkpoint FROM deployments
    WHERE status <> 'refused' ORDER BY stage_id, role, started_at DESC
) latest
UNION SELECT checkpoint FROM deployments WHERE status IN ('starting', 'running', 'stopping')
UNION SELECT path FROM staged_checkpoints WHERE status = 'ready'
UNION SELECT '*' || stage_id FROM reconfigurations WHERE status IN ('pending', 'running')
