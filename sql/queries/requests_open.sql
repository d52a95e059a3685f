SELECT id, stage_id, app, action, target_cores, target_pool, gain, cost_ms, reason, snapshot, refreshed_at, created_at
FROM requests
WHERE app = ANY(CAST(:apps AS text[])) AND status IN ('open', 'deferred')
ORDER BY id
