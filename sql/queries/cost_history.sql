SELECT stage_id, action, COALESCE(state_bytes, 0) AS state_bytes, downtime_ms
FROM reconfigurations
WHERE status = 'done' AND downtime_ms IS NOT NULL
ORDER BY finished_at DESC
LIMIT 5000
