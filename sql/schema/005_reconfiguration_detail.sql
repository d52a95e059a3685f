-- Measurements and links the mechanisms record beyond the phase stamps.
ALTER TABLE reconfigurations
    ADD COLUMN repartition_ms          double precision,  -- offline state repartition, measured in the driver
    ADD COLUMN staged_checkpoint       text,              -- pre-staged copy used (prestaged, active_backup)
    ADD COLUMN new_deployment_id       bigint REFERENCES deployments (id) ON DELETE SET NULL,
    ADD COLUMN old_deployment_id       bigint REFERENCES deployments (id) ON DELETE SET NULL;

-- A stage's staged checkpoint copies (pre-staged at the alarming level, discarded when it clears).
CREATE TABLE staged_checkpoints (
    id              bigserial PRIMARY KEY,
    stage_id        text NOT NULL REFERENCES stages (stage_id) ON DELETE CASCADE,
    source          text NOT NULL,       -- the live checkpoint it was copied from
    path            text NOT NULL,
    as_of_batch     bigint NOT NULL,     -- consistent as of this committed batch
    partitions      integer NOT NULL,    -- state partitions after the offline repartition of the copy
    status          text NOT NULL DEFAULT 'ready' CHECK (status IN ('ready', 'used', 'discarded')),
    created_at      timestamptz NOT NULL DEFAULT now(),
    closed_at       timestamptz
);
CREATE UNIQUE INDEX staged_checkpoints_one_ready ON staged_checkpoints (stage_id) WHERE status = 'ready';
