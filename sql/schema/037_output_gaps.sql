-- Availability from the output side (issue 48, item 5): input waited and no batch committed for
-- longer than the stage's gap limit, whatever the cause (the database stalled or stopped, a full
-- disk, a driver nobody saw die). The failure's detail names the cause when it is known. Backdated
-- to the stage's last commit and closed at its next one, so its downtime is the gap.
ALTER TABLE failures DROP CONSTRAINT failures_kind_check;
ALTER TABLE failures ADD CONSTRAINT failures_kind_check
    CHECK (kind IN ('stale_heartbeat', 'dead_pid', 'query_failed', 'batch_failed', 'launch_failed',
                    'master_lost', 'worker_lost', 'stalled', 'stopped', 'output_gap'));
