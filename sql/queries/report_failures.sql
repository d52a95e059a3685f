-- Failures whose output gap touches :day, for the shaded spans on the report's charts. The gap is
-- placed as reporting.downtime_for_day places it: ending at recovered_at, else open until now.
SELECT f.app, f.stage_id, f.kind, f.detail, f.status, f.attempts, f.failed_at, f.recovered_at,
       f.mttr_ms / 1000.0 AS mttr_s, f.downtime_ms / 1000.0 AS downtime_s,
       CASE WHEN f.recovered_at IS NOT NULL AND f.downtime_ms IS NOT NULL
            THEN f.recovered_at - make_interval(secs => f.downtime_ms / 1000.0)
            ELSE COALESCE(f.last_commit_at, f.failed_at) END AS gap_from,
       COALESCE(f.recovered_at, now()) AS gap_to
FROM failures f
WHERE (CAST(:app AS text) IS NULL OR f.app = CAST(:app AS text))
  AND f.failed_at < CAST(:day AS date) + 1
  AND COALESCE(f.recovered_at, now()) >= CAST(:day AS date)
ORDER BY f.failed_at
