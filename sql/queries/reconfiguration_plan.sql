-- Persist the plan before anything acts on it. A stage with a pending or running change gets
-- no second one (the unique index); the caller then records the grant as moot.
INSERT INTO reconfigurations (stage_id, app, action, from_cores, target_cores, from_pool, target_pool,
                              requested_by, request_id, decision_id, state_bytes)
SELECT s.stage_id, :app, :action, COALESCE(d.cores, s.cores), :target_cores, COALESCE(d.pool, s.pool),
       COALESCE(CAST(:target_pool AS text), d.pool, s.pool),
       'policy:' || COALESCE(r.policy, 'operator'), :request_id, :decision_id, :state_bytes
FROM stages s
LEFT JOIN requests r ON r.id = :request_id
LEFT JOIN LATERAL (
    SELECT cores, pool FROM deployments
    WHERE stage_id = s.stage_id AND role = 'primary' AND status = 'running'
    ORDER BY started_at DESC LIMIT 1
) d ON true
WHERE s.stage_id = :stage_id
ON CONFLICT (stage_id) WHERE status IN ('pending', 'running') DO NOTHING
RETURNING id
