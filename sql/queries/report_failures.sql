-- Failures whose output gap touches :day, for the shaded spans on the report's charts. The gap is
-- placed as reporting.downtime_for_day places it: from the stage's last commit before the failure,
-- for downtime_ms (a failure a surviving replica hid ends at that replica's next commit, before
-- recovered_at); open until now while it lasts.
SELECT f.app, f.stage_id, f.kind, f.detail, f.status, f.attempts, f.failed_at, f.recovered_at,
       f.mttr_ms / 1000.0 AS mttr_s, f.downtime_ms / 1000.0 AS downtime_s,
       COALESCE(f.last_commit_at, f.failed_at) AS gap_from,
       CASE WHEN f.recovered_at IS NOT NULL AND f.downtime_ms IS NOT NULL
            THEN COALESCE(f.last_commit_at, f.failed_at) + make_interval(secs => f.downtime_ms / 1000.0)
            ELSE COALESCE(f.recovered_at, now()) END AS gap_to
FROM failures f
WHERE (CAST(:app AS text) IS NULL OR f.app = CAST(:app AS text))
  AND f.failed_at < CAST(:day AS date) + 1
  AND COALESCE(f.recovered_at, now()) >= CAST(:day AS date)
ORDER BY f.failed_at
