-- Finished reconfigurations per stage, action, mechanism and end status. Only finished ones: a
-- finished row changes no more (reconfiguration_finish moves only pending or running ones), so
-- the counts only rise; retention keeps reconfigurations.
SELECT s.app, s.name AS stage, r.action, COALESCE(r.mechanism, 'none') AS mechanism, r.status, count(*) AS n
FROM reconfigurations r JOIN stages s ON s.stage_id = r.stage_id
WHERE r.status IN ('done', 'failed', 'rolled_back', 'cancelled')
GROUP BY 1, 2, 3, 4, 5
ORDER BY 1, 2, 3, 4, 5
