-- The soak's kills of drivers taken for hung, to be matched against the faults aimed at them.
SELECT stage_id, kind, detected_at, detail FROM failures
WHERE detected_at >= :a AND kind = ANY(:kinds)
ORDER BY detected_at
