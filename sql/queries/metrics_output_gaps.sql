-- The output gaps of closed failures (failures.downtime_ms: the stage's last commit before the
-- failure to its first after it; set once, when the failure closes) as cumulative histogram
-- buckets per stage and role: for each upper bound `le` (seconds, `:bounds`), the gaps at most
-- that long, with the count and sum of all of them (the +Inf bucket is the count).
WITH gaps AS (
    SELECT s.app, s.name AS stage, f.role, f.downtime_ms / 1000.0 AS gap_s
    FROM failures f JOIN stages s ON s.stage_id = f.stage_id
    WHERE f.downtime_ms IS NOT NULL
)
SELECT g.app, g.stage, g.role, b.le,
       count(*) FILTER (WHERE g.gap_s <= b.le) AS at_most,
       count(*) AS n, sum(g.gap_s) AS sum_s
FROM gaps g CROSS JOIN unnest(CAST(:bounds AS double precision[])) AS b(le)
GROUP BY 1, 2, 3, 4
ORDER BY 1, 2, 3, 4
