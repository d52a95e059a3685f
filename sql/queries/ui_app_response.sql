-- Each app's response time per minute over the last hour, for the Airflow page's sparkline: the
-- sum over its stages of each stage's mean p95 in the minute (batches that read input; primary
-- and active-backup runs, as `status` reads them). `complete` is false for a minute in which a
-- stage of the app reported nothing: the sum then understates the response.
WITH per_stage AS (
    SELECT s.app, m.stage_id, date_trunc('minute', m.ts) AS minute, avg(m.latency_p95_ms) AS p95_ms
    FROM stage_metrics m
    JOIN stages s ON s.stage_id = m.stage_id
    JOIN deployments d ON d.id = m.deployment_id
    WHERE m.ts > now() - interval '1 hour' AND m.input_rows > 0 AND d.role NOT LIKE 'replica-%'
    GROUP BY s.app, m.stage_id, date_trunc('minute', m.ts)
),
n AS (SELECT app, count(*) AS stages FROM stages GROUP BY app)
SELECT p.app, p.minute, sum(p.p95_ms) AS response_ms, count(*) = max(n.stages) AS complete
FROM per_stage p JOIN n ON n.app = p.app
GROUP BY p.app, p.minute
ORDER BY p.app, p.minute
