-- The soak's kills of drivers taken for hung, to be matched against the faults aimed at them.
-- A kill is timed by the start of the run that replaced the killed one: an output gap's row,
-- opened earlier, becomes the kill's failure when the driver is found hung (its detected_at
-- stays the gap's), so detected_at alone would put the kill before its fault.
SELECT f.stage_id, f.kind, coalesce(r.started_at, f.detected_at) AS killed_at, f.detail
FROM failures f LEFT JOIN deployments r ON r.id = f.recovery_deployment_id
WHERE f.detected_at >= :a AND f.kind = ANY(:kinds)
ORDER BY killed_at
