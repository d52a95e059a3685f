-- Every stage that wants replicas or has some live: the reconciler's worklist.
SELECT s.stage_id, s.replicas FROM stages s
WHERE s.health = 'ok'
  AND (s.replicas > 1 OR EXISTS (SELECT 1 FROM deployments d WHERE d.stage_id = s.stage_id
                                 AND d.role LIKE 'replica-%' AND d.status IN ('starting', 'running', 'stopping')))
ORDER BY s.stage_id
