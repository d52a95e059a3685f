-- Persist the plan before anything acts on it. A stage with a pending or running change gets
-- no second one (the unique index): that grant is moot and returns no row. A live scale-in's
-- mechanism is set: it was granted outside the maintenance window for being live.
INSERT INTO reconfigurations (stage_id, app, action, from_cores, target_cores, from_pool, target_pool,
                              requested_by, request_id, decision_id, state_bytes, mechanism)
SELECT s.stage_id, v.app, v.action, COALESCE(d.cores, s.cores), v.target_cores, COALESCE(d.pool, s.pool),
       COALESCE(v.target_pool, d.pool, s.pool), 'policy:' || COALESCE(r.policy, 'operator'),
       v.request_id, v.decision_id, v.state_bytes, v.mechanism
FROM (VALUES (%(stage_id)s, %(app)s, %(action)s, %(target_cores)s::int, %(target_pool)s::text,
              %(request_id)s::bigint, %(decision_id)s::bigint, %(state_bytes)s::bigint, %(mechanism)s::text))
     AS v (stage_id, app, action, target_cores, target_pool, request_id, decision_id, state_bytes, mechanism)
JOIN stages s ON s.stage_id = v.stage_id
LEFT JOIN requests r ON r.id = v.request_id
LEFT JOIN LATERAL (
    SELECT cores, pool FROM deployments
    WHERE stage_id = s.stage_id AND role = 'primary' AND status = 'running'
    ORDER BY started_at DESC LIMIT 1
) d ON true
ON CONFLICT (stage_id) WHERE status IN ('pending', 'running') DO NOTHING
RETURNING id, decision_id
