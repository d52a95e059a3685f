-- Failures per stage, role, kind and cause (real or injected), open ones included: a row's kind,
-- role and cause are fixed when it is written, and retention keeps failures.
SELECT s.app, s.name AS stage, f.role, f.kind, f.cause, count(*) AS n
FROM failures f JOIN stages s ON s.stage_id = f.stage_id
GROUP BY 1, 2, 3, 4, 5
ORDER BY 1, 2, 3, 4, 5
