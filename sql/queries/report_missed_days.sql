-- Days before :until (within :max_days) that have metrics but no all-apps report yet: the
-- nightly DAG backfills them (a scheduler that was down, a failed night).
SELECT d::date AS day
FROM generate_series(CAST(:until AS date) - (:max_days - 1), CAST(:until AS date) - 1, interval '1 day') AS d
WHERE NOT EXISTS (SELECT 1 FROM reports r WHERE r.day = d::date AND r.app IS NULL)
  AND EXISTS (SELECT 1 FROM stage_metrics m WHERE m.ts >= d AND m.ts < d + interval '1 day')
ORDER BY d
