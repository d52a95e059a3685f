-- The app's requests still to decide. A request not refreshed for :stale_s seconds has lost
-- its condition (its Operator Manager stopped asking) and is withdrawn instead.
SELECT id, stage_id, app, action, target_cores, target_pool, gain, cost_ms, reason, snapshot
FROM requests
WHERE app = :app AND status IN ('open', 'deferred') AND refreshed_at > now() - make_interval(secs => :stale_s)
ORDER BY id
