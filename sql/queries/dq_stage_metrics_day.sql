-- GX query asset (suite stage_metrics): one app's stage_metrics rows of :day (server TimeZone days,
-- constant ts bounds so only that day's partition is read). prev_batch_id is the batch id of the
-- run's previous batch in time order: GX has no "increasing within a group" expectation, so the
-- window function pairs each batch with its predecessor and GX checks batch_id > prev_batch_id.
SELECT m.stage_id, m.run_id, m.batch_id, m.ts, m.deployment_id,
       m.input_rps, m.processed_rps, m.latency_p50_ms, m.latency_p95_ms, m.latency_max_ms,
       lag(m.batch_id) OVER (PARTITION BY m.stage_id, m.run_id ORDER BY m.ts, m.batch_id) AS prev_batch_id
FROM stage_metrics m
WHERE m.ts >= CAST(:day AS date)::timestamptz AND m.ts < (CAST(:day AS date) + 1)::timestamptz
  AND m.stage_id IN (SELECT s.stage_id FROM stages s WHERE s.app = :app)
