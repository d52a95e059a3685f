-- The size of each stage's checkpoint on disk (issue 48 item 13: the taxi checkpoint grew to
-- 728 MB in an hour, and nothing showed it). The supervisor measures it at most once a minute
-- (execute/housekeeping.record_checkpoint_sizes, a walk of the directories) and keeps one row per
-- stage here; `streamops status --wide` and /metrics (streamops_checkpoint_bytes) read the row,
-- never the disk. docs/jobs.md says what bounds a checkpoint.
CREATE TABLE checkpoint_sizes (
    stage_id     text PRIMARY KEY REFERENCES stages (stage_id) ON DELETE CASCADE,
    bytes        bigint NOT NULL,    -- the checkpoints the stage's latest runs (one per role) resume from,
                                     -- with their quarantine query's: what the stage needs
    disk_bytes   bigint NOT NULL,    -- every checkpoint directory of the stage: also the rollback and staged
                                     -- copies and older runs' that `gc` has not removed yet
    files        integer NOT NULL,   -- files in `bytes`
    took_ms      double precision,   -- how long the walk took
    measured_at  timestamptz NOT NULL DEFAULT now()
);

-- streamops_observer (041) reads what status and /metrics show.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'streamops_observer') THEN
        GRANT SELECT ON checkpoint_sizes TO streamops_observer;
    END IF;
END $$;
