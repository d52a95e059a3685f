UPDATE stage_commands SET acked_at = now(), deployment_id = COALESCE(deployment_id, :deployment_id)
WHERE id = :id
