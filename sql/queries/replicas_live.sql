-- The live runs of one stage's replica set (the primary and 'replica-N'), one per role.
SELECT * FROM deployments
WHERE stage_id = :stage_id AND (role = 'primary' OR role LIKE 'replica-%')
  AND status IN ('starting', 'running', 'stopping')
ORDER BY role
