-- Operator Managers' requests, many at once (db.bulk: one VALUES row per request).
-- One open request per stage and action: a repeated request refreshes the open row.
INSERT INTO requests (stage_id, app, action, target_cores, target_pool, gain, cost_ms, reason, snapshot, policy)
VALUES (%(stage_id)s, %(app)s, %(action)s, %(target_cores)s, %(target_pool)s, %(gain)s, %(cost_ms)s, %(reason)s,
        %(snapshot)s::jsonb, %(policy)s)
ON CONFLICT (stage_id, action) WHERE status IN ('open', 'deferred') DO UPDATE
    -- plan.stability.refreshed_target: a scale-in still below the stage's cores keeps the most it asked for
    SET target_cores = CASE WHEN requests.action = 'scale_in'
                             AND requests.target_cores < (EXCLUDED.snapshot ->> 'cores')::numeric
                            THEN GREATEST(requests.target_cores, EXCLUDED.target_cores)
                            ELSE EXCLUDED.target_cores END,
        target_pool = EXCLUDED.target_pool, gain = EXCLUDED.gain,
        cost_ms = EXCLUDED.cost_ms, reason = EXCLUDED.reason, snapshot = EXCLUDED.snapshot,
        policy = EXCLUDED.policy, refreshed_at = now(), refresh_count = requests.refresh_count + 1
RETURNING id, stage_id, action
