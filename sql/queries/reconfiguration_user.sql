-- A reconfiguration asked for by a person (CLI or Airflow form): persisted as pending first.
INSERT INTO reconfigurations (stage_id, app, action, from_cores, target_cores, from_pool, target_pool,
                              target_partitions, mechanism, requested_by, state_bytes)
SELECT s.stage_id, s.app, :action, d.cores, COALESCE(:target_cores, d.cores), d.pool, COALESCE(:target_pool, d.pool),
       :target_partitions, :mechanism, :requested_by, NULL
FROM stages s
JOIN LATERAL (
    SELECT cores, pool FROM deployments WHERE stage_id = s.stage_id AND role = 'primary' AND status <> 'refused'
    ORDER BY started_at DESC LIMIT 1
) d ON true
WHERE s.stage_id = :stage_id
ON CONFLICT (stage_id) WHERE status IN ('pending', 'running') DO NOTHING
RETURNING id
