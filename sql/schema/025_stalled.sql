-- A run whose driver beats but makes no progress: input waits and nothing has been committed for
-- the supervisor's stall limit (a batch blocked in the sink, a wedged query). Recovered like a
-- hung driver: killed, then restarted from its checkpoint.
ALTER TABLE failures DROP CONSTRAINT failures_kind_check;
ALTER TABLE failures ADD CONSTRAINT failures_kind_check
    CHECK (kind IN ('stale_heartbeat', 'dead_pid', 'query_failed', 'batch_failed', 'launch_failed',
                    'master_lost', 'worker_lost', 'stalled'));
