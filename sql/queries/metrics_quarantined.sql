-- Quarantined lines per stage and reason kind since `:since` (the exporter's counter window): an
-- index-only range scan of quarantine_time, the day's lines only.
SELECT s.app, s.name AS stage, COALESCE(q.reason_kind, 'unknown') AS reason_kind, count(*) AS lines
FROM quarantine q JOIN stages s ON s.stage_id = q.stage_id
WHERE q.quarantined_at >= :since
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3
