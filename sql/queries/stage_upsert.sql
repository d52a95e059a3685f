INSERT INTO stages (stage_id, app, name, workload, pool, cores, min_cores, max_cores, state_partitions, trigger_ms, spec)
VALUES (:stage_id, :app, :name, :workload, :pool, :cores, :min_cores, :max_cores, :state_partitions, :trigger_ms, CAST(:spec AS jsonb))
ON CONFLICT (stage_id) DO UPDATE
    SET workload = EXCLUDED.workload, pool = EXCLUDED.pool, cores = EXCLUDED.cores, min_cores = EXCLUDED.min_cores,
        max_cores = EXCLUDED.max_cores, state_partitions = EXCLUDED.state_partitions, trigger_ms = EXCLUDED.trigger_ms,
        spec = EXCLUDED.spec, updated_at = now()
