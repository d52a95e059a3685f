-- A run's batches that read input, in order (bench/kafka.py): rows, time and end-to-end latency.
SELECT batch_id, ts, input_rows, batch_duration_ms, latency_p50_ms, latency_p95_ms, backlog_rows
FROM stage_metrics WHERE deployment_id = :d AND input_rows > 0 ORDER BY batch_id
