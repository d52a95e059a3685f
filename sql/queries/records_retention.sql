SELECT target, deleted FROM records_retention(CAST(:keep_days AS integer))
UNION ALL
SELECT 'sink_staging', sink_staging_retention()
UNION ALL
-- runs, their failures and beats: the metrics' window, which the reports read them over
SELECT target, deleted FROM runs_retention(CAST(:runs_keep_days AS integer))
