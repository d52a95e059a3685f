-- Two failures of Kafka stages. `data_lost`: records of the topic were deleted (retention,
-- delete-records, a recreated topic) before the stage read them; the driver's reason names the
-- topic, partitions and offset ranges, and the watchdog gives it up at once (a restart reads the
-- same missing offsets). `broker_lost`: the embedded broker died and the supervisor restarted it;
-- one per stage reading it, from the broker's last healthy sighting to the stage's next commit.
ALTER TABLE failures DROP CONSTRAINT failures_kind_check;
ALTER TABLE failures ADD CONSTRAINT failures_kind_check
    CHECK (kind IN ('stale_heartbeat', 'dead_pid', 'query_failed', 'batch_failed', 'launch_failed',
                    'master_lost', 'worker_lost', 'stalled', 'stopped', 'output_gap', 'data_lost',
                    'broker_lost'));
