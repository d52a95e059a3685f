-- The simulator's calibration: the stage's registered shape and the span of its batches
-- (`--minutes N` calibrates on the N minutes up to its latest batch).
SELECT s.stage_id, s.job, s.cores, s.min_cores, s.max_cores, s.state_partitions, s.trigger_ms, a.r_max_ms,
       CAST(s.spec -> 'source' ->> 'max_files_per_trigger' AS integer) AS max_files_per_trigger,
       (SELECT min(m.ts) FROM stage_metrics m WHERE m.stage_id = s.stage_id) AS first_ts,
       (SELECT max(m.ts) FROM stage_metrics m WHERE m.stage_id = s.stage_id) AS last_ts
FROM stages s
JOIN apps a ON a.name = s.app
WHERE s.stage_id = :stage_id
