-- The response-time chart of the nightly report, per app and :bucket_s-second bucket of :day.
-- Response time is summed over the app's stages as reporting.sla_for_day sums it (each stage's
-- batch p95: the critical path of a chain); within a bucket each stage counts with the mean of
-- its batches (response_ms) and with its worst batch (response_max_ms). cores: the cores the
-- app's stages ran with (the replicas of EDF's Fig. 4). A bucket is `complete` when every stage
-- that reported that day has a batch in it; otherwise its sum would understate the response.
-- Aggregated here so that a day arrives as at most 86 400 / :bucket_s rows per app.
WITH per_stage AS (
    SELECT s.app, m.stage_id,
           floor((date_part('epoch', m.ts) - date_part('epoch', CAST(:day AS date)::timestamptz))
                 / CAST(:bucket_s AS integer))::integer AS bucket,
           avg(m.latency_p95_ms) AS p95_ms,
           max(m.latency_p95_ms) AS p95_max_ms,
           max(COALESCE(m.cores, s.cores)) AS cores
    FROM stage_metrics m
    JOIN stages s ON s.stage_id = m.stage_id
    -- bounds against the day itself: PostgreSQL prunes stage_metrics to that day's partition
    WHERE m.ts >= CAST(:day AS date) AND m.ts < CAST(:day AS date) + 1
      AND (CAST(:app AS text) IS NULL OR s.app = CAST(:app AS text))
    GROUP BY 1, 2, 3
),
reporting_stages AS (
    SELECT app, count(DISTINCT stage_id) AS n FROM per_stage GROUP BY app
)
SELECT p.app, p.bucket,
       CAST(:day AS date)::timestamptz + make_interval(secs => p.bucket * CAST(:bucket_s AS integer)) AS ts,
       sum(p.p95_ms) AS response_ms,
       sum(p.p95_max_ms) AS response_max_ms,
       sum(p.cores)::integer AS cores,
       count(*) = max(r.n) AS complete
FROM per_stage p
JOIN reporting_stages r ON r.app = p.app
GROUP BY p.app, p.bucket
ORDER BY p.app, p.bucket
