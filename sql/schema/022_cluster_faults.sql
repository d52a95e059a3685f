-- The embedded Spark cluster's own faults: its master or a worker died and was restarted. The
-- drivers live on, but each stage running on the cluster lost its executors (a worker) or its
-- scheduler (the master) for a while: one failure per such stage, closed at its first commit
-- after the heal.
ALTER TABLE failures DROP CONSTRAINT failures_kind_check;
ALTER TABLE failures ADD CONSTRAINT failures_kind_check
    CHECK (kind IN ('stale_heartbeat', 'dead_pid', 'query_failed', 'batch_failed', 'launch_failed',
                    'master_lost', 'worker_lost'));
