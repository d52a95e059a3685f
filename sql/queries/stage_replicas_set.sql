-- Granted replica counts (the redundancy manager's add_replica / remove_replica), many at once.
UPDATE stages s SET replicas = v.replicas, updated_at = now()
FROM (VALUES (%(stage_id)s, %(replicas)s)) AS v (stage_id, replicas)
WHERE s.stage_id = v.stage_id
