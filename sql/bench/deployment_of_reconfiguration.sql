-- The run a reconfiguration started, found by its config when its start failed before the link.
SELECT * FROM deployments WHERE stage_id = :s AND config->>'reconfiguration_id' = :r ORDER BY id LIMIT 1
