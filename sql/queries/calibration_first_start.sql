-- The simulator's calibration (sim/calibrate.py): the stage's first deployment (its initial start,
-- a driver start like the one a pause-resume's restart makes): launched (started_at), running, and
-- its first output: its first sink commit, else its first batch's end (stage_metrics).
SELECT d.id AS deployment_id, d.cores, d.started_at, d.running_at,
       (SELECT min(c.committed_at) FROM sink_commits c WHERE c.stage_id = d.stage_id AND c.deployment_id = d.id) AS first_commit_at,
       (SELECT m.ts + m.batch_duration_ms * interval '1 millisecond'
        FROM stage_metrics m WHERE m.deployment_id = d.id ORDER BY m.ts LIMIT 1) AS first_batch_done_at
FROM deployments d
WHERE d.stage_id = :stage_id AND d.role = 'primary'
ORDER BY d.started_at, d.id
LIMIT 1
