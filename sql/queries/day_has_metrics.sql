-- Did any stage report a batch on :day (UTC)? One partition's index, a LIMIT 1 probe.
SELECT EXISTS (SELECT 1 FROM stage_metrics WHERE ts >= CAST(:day AS date) AND ts < CAST(:day AS date) + 1)
