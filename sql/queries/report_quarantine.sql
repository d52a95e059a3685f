-- Lines quarantined on :day per stage and reason kind ('batch failed': a batch quarantined whole).
SELECT s.app, q.stage_id, COALESCE(q.reason_kind, q.reason) AS reason_kind, count(*) AS lines,
       min(q.reason) AS example
FROM quarantine q JOIN stages s ON s.stage_id = q.stage_id
WHERE (CAST(:app AS text) IS NULL OR s.app = CAST(:app AS text))
  AND q.quarantined_at >= CAST(:day AS date) AND q.quarantined_at < CAST(:day AS date) + 1
GROUP BY s.app, q.stage_id, COALESCE(q.reason_kind, q.reason)
ORDER BY s.app, q.stage_id, lines DESC
