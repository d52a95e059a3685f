-- A driver stopped by a signal or a debugger (SIGSTOP, SIGTSTP, ptrace): alive, but unable to beat
-- or commit. The supervisor, on the drivers' host, sees it stopped within a second or two instead
-- of waiting out the heartbeat limit; it is killed (SIGKILL reaches a stopped process), then
-- restarted from its checkpoint, as a hung driver is. A kind of its own, not `stale_heartbeat`:
-- its detection bound (about 1 s) is not the heartbeat's (15 s), and the reports split by kind.
ALTER TABLE failures DROP CONSTRAINT failures_kind_check;
ALTER TABLE failures ADD CONSTRAINT failures_kind_check
    CHECK (kind IN ('stale_heartbeat', 'dead_pid', 'query_failed', 'batch_failed', 'launch_failed',
                    'master_lost', 'worker_lost', 'stalled', 'stopped'));
