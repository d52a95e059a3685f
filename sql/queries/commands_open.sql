-- Commands for this run (or for the stage, whichever run holds it) not yet acknowledged.
SELECT id, command, args FROM stage_commands
WHERE stage_id = :stage_id AND (deployment_id = :deployment_id OR deployment_id IS NULL)
  AND acked_at IS NULL AND done_at IS NULL
ORDER BY id
