SELECT target, deleted FROM records_retention(CAST(:keep_days AS integer))
UNION ALL
SELECT 'sink_staging', sink_staging_retention()
