-- High availability (issue 14): replica sets, failover by a supervisor, injected faults, and the
-- redundancy manager's state.

-- A stage runs `replicas` drivers at once: roles 'primary', 'replica-1', … each with its own
-- checkpoint, all writing the same version-guarded sink. The count is apps.yaml's, or the
-- redundancy manager's once it has decided.
ALTER TABLE stages ADD COLUMN IF NOT EXISTS replicas integer NOT NULL DEFAULT 1 CHECK (replicas >= 1);

-- A failure belongs to one replica: two replicas may be recovering at once.
ALTER TABLE failures ADD COLUMN role text NOT NULL DEFAULT 'primary';
-- 'injected' when the fault injector caused it (fault_id), else 'real'; reports split by it.
ALTER TABLE failures ADD COLUMN cause text NOT NULL DEFAULT 'real' CHECK (cause IN ('real', 'injected'));
ALTER TABLE failures ADD COLUMN fault_id bigint;
-- Who noticed: the supervisor (seconds) or the watchdog DAG (the second line).
ALTER TABLE failures ADD COLUMN detected_by text NOT NULL DEFAULT 'watchdog';
DROP INDEX failures_one_open;
CREATE UNIQUE INDEX failures_one_open ON failures (stage_id, role) WHERE status = 'recovering';

-- Every fault the injector caused, written by the driver before the fault acts (persist first):
-- a driver kill leaves its row behind, and a database outage is recorded before it starts.
CREATE TABLE injected_faults (
    id             bigserial PRIMARY KEY,
    stage_id       text NOT NULL REFERENCES stages (stage_id) ON DELETE CASCADE,
    deployment_id  bigint REFERENCES deployments (id) ON DELETE SET NULL,
    role           text NOT NULL DEFAULT 'primary',
    kind           text NOT NULL CHECK (kind IN ('slow_batch', 'driver_kill', 'executor_kill',
                                                 'heartbeat_cut', 'db_outage')),
    magnitude_s    double precision,          -- the pause, cut or outage length; NULL for kills
    source         text NOT NULL,             -- 'schedule' (apps.yaml or `fault --mtbf`) or 'cli'
    detail         text NOT NULL DEFAULT '',
    injected_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX injected_faults_stage_time ON injected_faults (stage_id, injected_at);

-- A running driver is told to inject a fault now (`fault`: the CLI, or its stage-level schedule).
ALTER TABLE stage_commands DROP CONSTRAINT stage_commands_command_check;
ALTER TABLE stage_commands ADD CONSTRAINT stage_commands_command_check
    CHECK (command IN ('stop', 'scale', 'repartition', 'fault'));

-- The redundancy manager's memory between periods (plan.redundancy.RedundancyState).
CREATE TABLE redundancy_states (
    stage_id       text PRIMARY KEY REFERENCES stages (stage_id) ON DELETE CASCADE,
    r              double precision NOT NULL,
    direction      integer NOT NULL DEFAULT 0,
    last_delta_ms  double precision,
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- A change of replica count is a request like any other, granted by the Application Manager
-- (the count asked for is in its snapshot's target_replicas).
ALTER TABLE requests DROP CONSTRAINT requests_action_check;
ALTER TABLE requests ADD CONSTRAINT requests_action_check
    CHECK (action IN ('scale_out', 'scale_in', 'migrate', 'prestage', 'release_prestage',
                      'add_replica', 'remove_replica'));

ALTER TABLE failures ADD CONSTRAINT failures_fault_fk
    FOREIGN KEY (fault_id) REFERENCES injected_faults (id) ON DELETE SET NULL;
