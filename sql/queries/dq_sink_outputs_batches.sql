-- GX query asset (gate after a reconfiguration): the stage's sink_outputs rows last written by the
-- run (deployment): batch ids from its first to its latest commit (sink_commits), with the count
-- extracted from the jsonb value. Not only its first batches' rows: a run that starts behind
-- overwrites those keys within seconds, and the rows would be gone before the gate reads them.
-- :since bounds the commits to those after a change made in the running driver (live, in_driver).
-- (A SELECT, not a WITH: GX query assets must start with SELECT.)
SELECT o.stage_id, o.key, CAST(o.value ->> 'count' AS bigint) AS count, o.version, o.batch_id, o.written_at
FROM sink_outputs o,
     (SELECT min(batch_id) AS lo, max(batch_id) AS hi
      FROM sink_commits
      WHERE deployment_id = CAST(:deployment_id AS bigint) AND stage_id = :stage_id
        AND committed_at >= CAST(:since AS timestamptz)) run_commits
WHERE o.stage_id = :stage_id AND o.batch_id BETWEEN run_commits.lo AND run_commits.hi
