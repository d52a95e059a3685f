-- A run's batches that read input, in order: the first is the cold one (bench/first_batch.py).
SELECT batch_id, ts, batch_duration_ms, input_rows FROM stage_metrics
WHERE deployment_id = :d AND input_rows > 0 ORDER BY batch_id
