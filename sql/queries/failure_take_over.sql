-- A failure the watchdog found (a dead, hung or stalled driver) takes over the open output gap of
-- its stage (execute/gaps.py): its kind, its time (its last healthy sighting; the gap's start stays
-- in last_commit_at) and its detail, the gap's kept after it.
UPDATE failures SET kind = :kind, failed_at = GREATEST(failed_at, CAST(:failed_at AS timestamptz)),
       detected_by = :detected_by, detail = left(:detail || '; before: ' || detail, 2000)
WHERE id = :id AND kind = 'output_gap' AND status = 'recovering'
