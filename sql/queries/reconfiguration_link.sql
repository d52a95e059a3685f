-- Which runs (and staged copy) a reconfiguration used; a NULL argument leaves its column as it is.
UPDATE reconfigurations
SET old_deployment_id = COALESCE(CAST(:old_deployment_id AS bigint), old_deployment_id),
    new_deployment_id = COALESCE(CAST(:new_deployment_id AS bigint), new_deployment_id),
    staged_checkpoint = COALESCE(CAST(:staged_checkpoint AS text), staged_checkpoint)
WHERE id = :id
