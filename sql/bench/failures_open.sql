-- Failures the soak leaves open at its end: each is named in its result.
SELECT id, stage_id, kind, detected_at, detail FROM failures
WHERE detected_at >= :a AND status = 'recovering'
ORDER BY id
