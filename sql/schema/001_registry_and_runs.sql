-- Registry rows (synced from apps.yaml by `streamops deploy`), stage runs and the
-- driver <-> control-plane channel (heartbeats, commands).

CREATE TABLE pools (
    name              text PRIMARY KEY,
    master            text NOT NULL,                 -- Spark master URL; `local` = this machine
    cores             integer NOT NULL CHECK (cores > 0),
    network_delay_ms  jsonb NOT NULL DEFAULT '{}',   -- {other_pool: ms}
    updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE apps (
    name                text PRIMARY KEY,
    r_max_ms            integer NOT NULL CHECK (r_max_ms > 0),
    maintenance_window  jsonb NOT NULL,
    spec                jsonb NOT NULL,
    updated_at          timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE stages (
    stage_id          text PRIMARY KEY,              -- "<app>.<stage>"
    app               text NOT NULL REFERENCES apps (name) ON DELETE CASCADE,
    name              text NOT NULL,
    workload          text NOT NULL,
    pool              text NOT NULL REFERENCES pools (name),
    cores             integer NOT NULL,
    min_cores         integer NOT NULL,
    max_cores         integer NOT NULL,
    state_partitions  integer NOT NULL,
    trigger_ms        integer NOT NULL,
    spec              jsonb NOT NULL,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (app, name),
    CHECK (min_cores <= cores AND cores <= max_cores)
);

-- One row per run of a stage: what was started, where, with which config, and how it ended.
CREATE TABLE deployments (
    id                bigserial PRIMARY KEY,
    stage_id          text NOT NULL REFERENCES stages (stage_id) ON DELETE CASCADE,
    role              text NOT NULL DEFAULT 'primary',  -- later: 'secondary' during an active-backup overlap
    pool              text NOT NULL REFERENCES pools (name),
    cores             integer NOT NULL,
    state_partitions  integer NOT NULL,
    config            jsonb NOT NULL,
    launcher          text NOT NULL,
    pid               integer,
    driver_id         text,                          -- Spark application id once the driver is up
    host              text,
    checkpoint        text NOT NULL,
    log_path          text,
    status            text NOT NULL CHECK (status IN ('starting', 'running', 'stopping', 'stopped', 'failed', 'refused')),
    started_at        timestamptz NOT NULL DEFAULT now(),
    running_at        timestamptz,
    stopped_at        timestamptz,
    stop_reason       text,
    exit_code         integer
);
-- At most one live run per stage and role: a second `start` fails instead of doubling the stage.
CREATE UNIQUE INDEX deployments_one_live_run
    ON deployments (stage_id, role) WHERE status IN ('starting', 'running', 'stopping');
CREATE INDEX deployments_stage_started ON deployments (stage_id, started_at DESC);

-- Latest heartbeat per run (history is in stage_metrics; a beat only says "alive").
CREATE TABLE heartbeats (
    deployment_id   bigint PRIMARY KEY REFERENCES deployments (id) ON DELETE CASCADE,
    stage_id        text NOT NULL,
    beat_at         timestamptz NOT NULL DEFAULT now(),
    query_active    boolean NOT NULL,
    trigger_active  boolean NOT NULL DEFAULT false,
    last_batch_id   bigint,
    info            jsonb NOT NULL DEFAULT '{}'
);

-- Requests to a running driver; the driver's poller acknowledges and completes them.
CREATE TABLE stage_commands (
    id             bigserial PRIMARY KEY,
    stage_id       text NOT NULL REFERENCES stages (stage_id) ON DELETE CASCADE,
    deployment_id  bigint REFERENCES deployments (id) ON DELETE CASCADE,
    command        text NOT NULL CHECK (command IN ('stop')),
    args           jsonb NOT NULL DEFAULT '{}',
    requested_by   text NOT NULL DEFAULT current_user,
    requested_at   timestamptz NOT NULL DEFAULT now(),
    acked_at       timestamptz,
    done_at        timestamptz,
    outcome        text
);
CREATE INDEX stage_commands_open ON stage_commands (deployment_id) WHERE done_at IS NULL;

-- Malformed input records, with the raw text and why. Keyed so that a replayed batch adds nothing.
CREATE TABLE quarantine (
    id              bigserial PRIMARY KEY,
    stage_id        text NOT NULL,
    deployment_id   bigint,
    batch_id        bigint,
    source_file     text,
    record_key      text NOT NULL,                   -- md5(source_file || raw)
    raw             text NOT NULL,
    reason          text NOT NULL,
    quarantined_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (stage_id, record_key)
);
