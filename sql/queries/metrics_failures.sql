-- Failures per stage, role, kind and cause (real or injected), open ones included: a row's kind,
-- role and cause are fixed when it is written, and those retention deleted are tallied in
-- failures_pruned (migration 040), so the counter never falls.
SELECT s.app, s.name AS stage, f.role, f.kind, f.cause, sum(f.n) AS n
FROM (SELECT stage_id, role, kind, cause, 1 AS n FROM failures
      UNION ALL
      SELECT stage_id, role, kind, cause, n FROM failures_pruned) f
JOIN stages s ON s.stage_id = f.stage_id
GROUP BY 1, 2, 3, 4, 5
ORDER BY 1, 2, 3, 4, 5
