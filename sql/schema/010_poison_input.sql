-- Input that cannot stop a stage (issue 16).
--
-- Quarantine rows keep the reason's kind for grouping, the line's size, and its exact bytes
-- whenever the `raw` text is not faithful to them (invalid UTF-8, NUL bytes).
ALTER TABLE quarantine
    ADD COLUMN reason_kind  text,
    ADD COLUMN raw_bytes    bytea,           -- NULL when `raw` is the line exactly
    ADD COLUMN raw_size     integer;         -- bytes of the line
UPDATE quarantine SET reason_kind = CASE
    WHEN reason LIKE 'malformed JSON%' THEN 'malformed JSON'
    WHEN reason LIKE 'missing field%' THEN 'missing field'
    WHEN reason LIKE 'wrong type%' THEN 'wrong type'
    ELSE reason END
WHERE reason_kind IS NULL;
CREATE INDEX quarantine_stage_kind ON quarantine (stage_id, reason_kind);

-- A batch that fails: one row per stage, query and batch, counting failures in a row with the
-- same error. At `poison_after_failures` the batch's files are quarantined whole (status
-- 'quarantined') and every later run of the stage leaves those files out.
CREATE TABLE batch_failures (
    stage_id         text NOT NULL REFERENCES stages (stage_id) ON DELETE CASCADE,
    query            text NOT NULL CHECK (query IN ('main', 'quarantine')),
    batch_id         bigint NOT NULL,
    files            text[] NOT NULL,        -- the batch's input files, from the checkpoint's source log
    error            text NOT NULL,          -- the root cause of the last failure
    attempts         integer NOT NULL,       -- failures in a row with this error
    deployment_id    bigint REFERENCES deployments (id) ON DELETE SET NULL,
    first_failed_at  timestamptz NOT NULL DEFAULT now(),
    last_failed_at   timestamptz NOT NULL DEFAULT now(),
    status           text NOT NULL DEFAULT 'retrying' CHECK (status IN ('retrying', 'quarantined', 'passed')),
    quarantined_rows bigint,
    quarantined_at   timestamptz,
    PRIMARY KEY (stage_id, query, batch_id)
);
CREATE INDEX batch_failures_quarantined ON batch_failures (stage_id) WHERE status = 'quarantined';

-- The driver records its own failed batches beside the watchdog's failures.
ALTER TABLE failures DROP CONSTRAINT failures_kind_check;
ALTER TABLE failures ADD CONSTRAINT failures_kind_check
    CHECK (kind IN ('stale_heartbeat', 'dead_pid', 'query_failed', 'batch_failed'));
