SELECT COALESCE(sum(cores), 0) AS used FROM deployments
WHERE pool = :pool AND status IN ('starting', 'running', 'stopping')
