-- May this run quarantine a failing batch whole? Facts for agent/poison.py:
--   previous_same: the batch before it was itself quarantined whole with the same error (then
--                  the run, not the data, is broken);
--   config_committed: a run with this configuration (spec and fault) has committed output;
--   any_committed: any run of the stage has.
SELECT
    EXISTS (SELECT 1 FROM batch_failures WHERE stage_id = :stage_id AND role = :role AND query = :query
            AND batch_id = :batch_id - 1 AND status = 'quarantined' AND error = :error) AS previous_same,
    EXISTS (SELECT 1 FROM sink_commits c JOIN deployments d ON d.id = c.deployment_id
            WHERE c.stage_id = :stage_id AND d.config -> 'spec' = (SELECT config -> 'spec' FROM deployments WHERE id = :deployment_id)
              AND COALESCE(d.config ->> 'fault', '') = (SELECT COALESCE(config ->> 'fault', '') FROM deployments WHERE id = :deployment_id)
            ) AS config_committed,
    EXISTS (SELECT 1 FROM sink_commits WHERE stage_id = :stage_id) AS any_committed
