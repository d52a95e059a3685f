-- A stage from apps.yaml. Its replica count is apps.yaml's, unless the redundancy manager owns
-- it (`managed`): then the count it was granted stays, within the new maximum.
INSERT INTO stages (stage_id, app, name, workload, pool, cores, min_cores, max_cores, state_partitions, trigger_ms, spec,
                    replicas)
VALUES (:stage_id, :app, :name, :workload, :pool, :cores, :min_cores, :max_cores, :state_partitions, :trigger_ms,
        CAST(:spec AS jsonb), :replicas)
ON CONFLICT (stage_id) DO UPDATE
    SET workload = EXCLUDED.workload, pool = EXCLUDED.pool, cores = EXCLUDED.cores, min_cores = EXCLUDED.min_cores,
        max_cores = EXCLUDED.max_cores, state_partitions = EXCLUDED.state_partitions, trigger_ms = EXCLUDED.trigger_ms,
        spec = EXCLUDED.spec, updated_at = now(),
        replicas = CASE WHEN CAST(:managed AS boolean) THEN LEAST(stages.replicas, CAST(:max_replicas AS integer))
                        ELSE EXCLUDED.replicas END
