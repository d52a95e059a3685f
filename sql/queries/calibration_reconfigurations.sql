-- The simulator's calibration: a stage's reconfigurations (not cancelled) that overlap [from_ts, to_ts]
-- (requested before its end, not finished before its start), with every phase stamp and the measured
-- output gap (downtime_ms).
SELECT id, action, mechanism, status, from_cores, target_cores, state_bytes, requested_at, stop_requested_at,
       stopped_at, state_ready_at, restarted_at, first_batch_done_at, caught_up_at, finished_at, downtime_ms,
       repartition_ms, old_deployment_id, new_deployment_id
FROM reconfigurations
WHERE stage_id = :stage_id AND status <> 'cancelled'
  AND requested_at <= CAST(:to_ts AS timestamptz)
  AND COALESCE(finished_at, caught_up_at, first_batch_done_at, restarted_at, requested_at) >= CAST(:from_ts AS timestamptz)
ORDER BY requested_at
