SELECT * FROM deployments WHERE stage_id = :s AND role = 'primary' AND status IN ('starting', 'running', 'stopping')
ORDER BY started_at DESC LIMIT 1
