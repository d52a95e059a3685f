INSERT INTO stage_metrics (
    ts, stage_id, deployment_id, run_id, batch_id, input_rows, input_rps, processed_rps,
    batch_duration_ms, trigger_interval_ms, add_batch_ms, backlog_files, backlog_rows,
    state_rows, state_bytes, output_rows, latency_p50_ms, latency_p95_ms, latency_max_ms,
    quarantined_rows, cores, state_partitions, durations, source_lag)
SELECT
    :ts, :stage_id, :deployment_id, :run_id, :batch_id, :input_rows, :input_rps, :processed_rps,
    :batch_duration_ms, :trigger_interval_ms, :add_batch_ms, :backlog_files, :backlog_rows,
    :state_rows, :state_bytes, :output_rows, :latency_p50_ms, :latency_p95_ms, :latency_max_ms,
    :quarantined_rows, :cores, :state_partitions, CAST(:durations AS jsonb),
    CAST(:source_lag AS jsonb)
WHERE run_is_current(CAST(:deployment_id AS bigint))  -- fenced: a stale run reports nothing
ON CONFLICT DO NOTHING
