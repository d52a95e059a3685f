INSERT INTO stage_commands (stage_id, deployment_id, command, args, requested_by)
VALUES (:stage_id, :deployment_id, 'stop', CAST(:args AS jsonb), :requested_by)
RETURNING id
