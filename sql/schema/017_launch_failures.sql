-- A run whose launch raised (the master down, a broken pipe to a warm spare) or never completed
-- (still `starting` after the launch limit): a failure of its own kind, recovered like the others.
ALTER TABLE failures DROP CONSTRAINT failures_kind_check;
ALTER TABLE failures ADD CONSTRAINT failures_kind_check
    CHECK (kind IN ('stale_heartbeat', 'dead_pid', 'query_failed', 'batch_failed', 'launch_failed'));
