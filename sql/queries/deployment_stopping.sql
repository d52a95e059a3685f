UPDATE deployments SET status = 'stopping' WHERE id = :id AND status IN ('starting', 'running')
