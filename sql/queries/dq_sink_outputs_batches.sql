-- GX query asset (gate after a reconfiguration): a stage's sink_outputs rows written by the first :n
-- batches the run (deployment) committed (sink_commits), with the count extracted from the jsonb value.
-- (A SELECT, not a WITH: GX query assets must start with SELECT.)
SELECT o.stage_id, o.key, CAST(o.value ->> 'count' AS bigint) AS count, o.version, o.batch_id, o.written_at
FROM sink_outputs o,
     (SELECT min(c.batch_id) AS lo, max(c.batch_id) AS hi
      FROM (SELECT batch_id FROM sink_commits
            WHERE deployment_id = CAST(:deployment_id AS bigint) AND stage_id = :stage_id
            ORDER BY batch_id LIMIT CAST(:n AS integer)) c) first_commits
WHERE o.stage_id = :stage_id AND o.batch_id BETWEEN first_commits.lo AND first_commits.hi
