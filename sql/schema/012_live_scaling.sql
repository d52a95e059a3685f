-- Live scaling on a Spark cluster (issue 13): a running driver is told to change its executors
-- (a `scale` command); the run keeps its deployment row, whose `cores` follow the change, and
-- every change is kept so that core-hours stay exact.
ALTER TABLE stage_commands DROP CONSTRAINT stage_commands_command_check;
ALTER TABLE stage_commands ADD CONSTRAINT stage_commands_command_check CHECK (command IN ('stop', 'scale'));

CREATE TABLE deployment_scaling (
    id             bigserial PRIMARY KEY,
    deployment_id  bigint NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
    from_cores     integer NOT NULL,
    to_cores       integer NOT NULL,
    at             timestamptz NOT NULL DEFAULT now(),
    reconfiguration_id bigint REFERENCES reconfigurations (id) ON DELETE SET NULL
);
CREATE INDEX deployment_scaling_run ON deployment_scaling (deployment_id, at);

-- The live mechanism's phases: when the driver was asked, and when its executors were there.
ALTER TABLE reconfigurations
    ADD COLUMN scale_requested_at  timestamptz,
    ADD COLUMN executors_ready_at  timestamptz;
