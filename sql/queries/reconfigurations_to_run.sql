-- Reconfigurations in one of the given statuses, optionally narrowed to some stages, apps or actions
-- (NULL: all), oldest first: what `execute_pending` and `--resume` go through.
SELECT * FROM reconfigurations
WHERE status = ANY(:statuses)
  AND (CAST(:stages AS text[]) IS NULL OR stage_id = ANY(CAST(:stages AS text[])))
  AND (CAST(:apps AS text[]) IS NULL OR app = ANY(CAST(:apps AS text[])))
  AND (CAST(:actions AS text[]) IS NULL OR action = ANY(CAST(:actions AS text[])))
ORDER BY id
