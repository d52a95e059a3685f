INSERT INTO deployments (stage_id, role, pool, cores, state_partitions, config, launcher, checkpoint, status, stop_reason, stopped_at)
VALUES (:stage_id, :role, :pool, :cores, :state_partitions, CAST(:config AS jsonb), :launcher, :checkpoint, :status, :reason,
        CASE WHEN :status = 'refused' THEN now() END)
RETURNING id
