SELECT d.*, p.master FROM deployments d JOIN pools p ON p.name = d.pool
WHERE d.stage_id = :stage_id AND d.role = :role AND d.status IN ('starting', 'running', 'stopping')
FOR UPDATE OF d
