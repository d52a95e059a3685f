-- The output gaps of closed failures (failures.downtime_ms: the stage's last commit before the
-- failure to its first after it; set once, when the failure closes) as cumulative histogram
-- buckets per stage and role: for each upper bound `le` (seconds, `:bounds`), the gaps at most
-- that long, with the count and sum of all of them (the +Inf bucket is the count). Gaps of
-- failures retention deleted count by their bucket (failure_gaps_pruned, migration 040).
WITH gaps AS (
    SELECT f.stage_id, f.role, f.downtime_ms / 1000.0 AS gap_s, 1 AS n, f.downtime_ms / 1000.0 AS sum_s
    FROM failures f
    WHERE f.downtime_ms IS NOT NULL
    UNION ALL
    SELECT stage_id, role, le_s, n, sum_s FROM failure_gaps_pruned
)
SELECT s.app, s.name AS stage, g.role, b.le,
       COALESCE(sum(g.n) FILTER (WHERE g.gap_s <= b.le), 0) AS at_most,
       sum(g.n) AS n, sum(g.sum_s) AS sum_s
FROM gaps g JOIN stages s ON s.stage_id = g.stage_id
CROSS JOIN unnest(CAST(:bounds AS double precision[])) AS b(le)
GROUP BY 1, 2, 3, 4
ORDER BY 1, 2, 3, 4
