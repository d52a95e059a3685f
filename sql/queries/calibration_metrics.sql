-- The simulator's calibration (sim/calibrate.py): one stage's batches in [from_ts, to_ts], every
-- run's, in time order, with what the model is fitted to (rows, durations, cores, latency).
SELECT m.ts, m.deployment_id, m.run_id, m.batch_id, m.input_rows, m.input_rps, m.processed_rps,
       m.batch_duration_ms, m.add_batch_ms, COALESCE(m.trigger_interval_ms, s.trigger_ms) AS trigger_interval_ms,
       m.backlog_files, m.backlog_rows, m.state_rows, m.state_bytes, m.output_rows,
       m.latency_p50_ms, m.latency_p95_ms, m.latency_max_ms, COALESCE(m.cores, s.cores) AS cores, m.state_partitions
FROM stage_metrics m
JOIN stages s ON s.stage_id = m.stage_id
WHERE m.stage_id = :stage_id
  AND m.ts >= CAST(:from_ts AS timestamptz) AND m.ts <= CAST(:to_ts AS timestamptz)
ORDER BY m.ts, m.batch_id
