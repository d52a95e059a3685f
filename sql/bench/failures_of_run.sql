-- A run's failures once recovered (or given up); the ones kinds given, if any (a kill is dead_pid,
-- not an output gap the load caused before it).
SELECT * FROM failures WHERE deployment_id = :d AND status <> 'recovering'
AND (CAST(:kinds AS text[]) IS NULL OR kind = ANY(CAST(:kinds AS text[])))
ORDER BY failed_at
