-- GX query asset (gate after a reconfiguration): the first :n batches of one run (deployment),
-- in time order, with the previous batch id of the same Spark run as in dq_stage_metrics_day.sql.
SELECT * FROM (
    SELECT m.stage_id, m.run_id, m.batch_id, m.ts, m.deployment_id,
           m.input_rps, m.processed_rps, m.latency_p50_ms, m.latency_p95_ms, m.latency_max_ms,
           lag(m.batch_id) OVER (PARTITION BY m.stage_id, m.run_id ORDER BY m.ts, m.batch_id) AS prev_batch_id
    FROM stage_metrics m
    WHERE m.deployment_id = CAST(:deployment_id AS bigint)
      AND m.stage_id = :stage_id
      AND m.ts >= CAST(:since AS timestamptz)
    ORDER BY m.ts, m.batch_id
    LIMIT CAST(:n AS integer)
) first_batches
