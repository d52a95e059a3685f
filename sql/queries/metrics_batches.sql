-- Batches per stage and role since `:since` (the exporter's counter window; retention never
-- deletes a row of the current UTC day, so the count only rises within it).
SELECT s.app, s.name AS stage, COALESCE(d.role, 'primary') AS role, sum(m.n) AS batches
FROM (SELECT stage_id, deployment_id, count(*) AS n FROM stage_metrics
      WHERE ts >= :since GROUP BY stage_id, deployment_id) m
JOIN stages s ON s.stage_id = m.stage_id
LEFT JOIN deployments d ON d.id = m.deployment_id
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3
