-- A stage from apps.yaml. Its replica count is apps.yaml's, unless the redundancy manager owns
-- it (`managed`: the count it was granted stays, within the new maximum) or a deploy overrode it
-- (`replicas_override`, set or cleared only by a deploy: `set_override`; every other sync keeps it).
INSERT INTO stages (stage_id, app, name, job, pool, cores, min_cores, max_cores, state_partitions, trigger_ms, spec,
                    replicas, replicas_override)
VALUES (:stage_id, :app, :name, :job, :pool, :cores, :min_cores, :max_cores, :state_partitions, :trigger_ms,
        CAST(:spec AS jsonb), COALESCE(CAST(:override AS integer), :replicas), CAST(:override AS integer))
ON CONFLICT (stage_id) DO UPDATE
    SET job = EXCLUDED.job, pool = EXCLUDED.pool, cores = EXCLUDED.cores, min_cores = EXCLUDED.min_cores,
        max_cores = EXCLUDED.max_cores, state_partitions = EXCLUDED.state_partitions, trigger_ms = EXCLUDED.trigger_ms,
        spec = EXCLUDED.spec, updated_at = now(),
        replicas_override = CASE WHEN CAST(:set_override AS boolean) THEN EXCLUDED.replicas_override
                                 ELSE stages.replicas_override END,
        replicas = CASE WHEN CAST(:managed AS boolean) THEN LEAST(stages.replicas, CAST(:max_replicas AS integer))
                        ELSE COALESCE(CASE WHEN CAST(:set_override AS boolean) THEN EXCLUDED.replicas_override
                                           ELSE stages.replicas_override END, CAST(:replicas AS integer)) END
