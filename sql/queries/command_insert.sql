-- A command for a stage's live run (`stop`, `scale`), picked up by its driver's poller.
INSERT INTO stage_commands (stage_id, deployment_id, command, args, requested_by)
VALUES (:stage_id, :deployment_id, :command, CAST(:args AS jsonb), :requested_by)
RETURNING id
