-- The response-time chart of the nightly report, per app and :bucket_s-second bucket of :day.
-- Response time is summed over the app's stages as reporting.sla_for_day sums it (each stage's
-- batch p95: the critical path of a chain); within a bucket each stage counts with the mean of
-- its batches (response_ms) and with its worst batch (response_max_ms). A stage with several runs
-- in the bucket (replicas, an active backup's overlap; stage_metrics.deployment_id tells them
-- apart) counts with its fastest run, as in sla_for_day: the lowest of its runs' means, and the
-- lowest of its runs' worst batches. cores: the cores the app's stages ran with (the replicas of
-- EDF's Fig. 4), summed over every run that wrote a batch in the bucket, since each replica holds
-- its own. A bucket is `complete` when every stage that reported that day has a batch in it;
-- otherwise its sum would understate the response.
-- Aggregated here so that a day arrives as at most 86 400 / :bucket_s rows per app.
WITH per_run AS (
    -- per run (stage_metrics.deployment_id) and bucket; narrow (no app, sum and count rather than
    -- avg) so that the planner keeps this a hash aggregate instead of sorting the day's rows
    SELECT m.stage_id, m.deployment_id,
           floor((date_part('epoch', m.ts) - date_part('epoch', CAST(:day AS date)::timestamptz))
                 / CAST(:bucket_s AS integer))::integer AS bucket,
           sum(m.latency_p95_ms) / count(m.latency_p95_ms) AS p95_ms,
           max(m.latency_p95_ms) AS p95_max_ms,
           max(m.cores) AS cores, bool_or(m.cores IS NULL) AS cores_missing
    FROM stage_metrics m
    -- bounds against the day itself: PostgreSQL prunes stage_metrics to that day's partition
    WHERE m.ts >= CAST(:day AS date) AND m.ts < CAST(:day AS date) + 1
      AND (CAST(:app AS text) IS NULL
           OR m.stage_id IN (SELECT s.stage_id FROM stages s WHERE s.app = CAST(:app AS text)))
    GROUP BY 1, 2, 3
),
per_stage AS (
    SELECT s.app, r.stage_id, r.bucket,
           min(r.p95_ms) AS p95_ms,
           min(r.p95_max_ms) AS p95_max_ms,
           -- a batch without cores counts with the stage's
           sum(CASE WHEN r.cores_missing THEN GREATEST(r.cores, s.cores) ELSE r.cores END) AS cores
    FROM per_run r
    JOIN stages s ON s.stage_id = r.stage_id
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
