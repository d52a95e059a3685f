-- The simulator's calibration: a stage's failures in [from_ts, to_ts], with what
-- reporting.downtime_for_day (sql/reports/20_downtime.sql) places their output gap by.
SELECT id, kind, role, failed_at, last_commit_at, recovered_at, downtime_ms, mttr_ms
FROM failures
WHERE stage_id = :stage_id
  AND failed_at >= CAST(:from_ts AS timestamptz) AND failed_at <= CAST(:to_ts AS timestamptz)
ORDER BY failed_at
