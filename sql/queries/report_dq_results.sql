-- The latest data-quality result per (suite, target) for :day; rows of other apps are left out
-- when the report is for one app, rows that belong to no app stay.
SELECT DISTINCT ON (suite, target) suite, target, app, success, statistics, details, run_at,
       count(*) OVER (PARTITION BY suite, target) AS runs
FROM dq_results
WHERE day = CAST(:day AS date)
  AND (CAST(:app AS text) IS NULL OR app IS NULL OR app = CAST(:app AS text))
ORDER BY suite, target, run_at DESC, id DESC
