-- The control loop's record: what each Operator Manager asked, what each Application Manager
-- decided and why, and the reconfigurations it planned. "Why did stage X restart at 03:12" is
-- one join: reconfigurations → decisions → requests.

-- One row per Operator Manager request. At most one open row per stage and action: a request
-- that persists is refreshed (refreshed_at, refresh_count), never duplicated.
CREATE TABLE requests (
    id             bigserial PRIMARY KEY,
    stage_id       text NOT NULL REFERENCES stages (stage_id) ON DELETE CASCADE,
    app            text NOT NULL,
    action         text NOT NULL CHECK (action IN ('scale_out', 'scale_in', 'migrate', 'prestage', 'release_prestage')),
    target_cores   integer,
    target_pool    text,
    gain           double precision NOT NULL,
    cost_ms        double precision NOT NULL,
    reason         text NOT NULL,
    snapshot       jsonb NOT NULL DEFAULT '{}',
    policy         text NOT NULL,
    status         text NOT NULL DEFAULT 'open'
                   CHECK (status IN ('open', 'deferred', 'granted', 'declined', 'withdrawn')),
    created_at     timestamptz NOT NULL DEFAULT now(),
    refreshed_at   timestamptz NOT NULL DEFAULT now(),
    refresh_count  integer NOT NULL DEFAULT 0,
    closed_at      timestamptz
);
CREATE UNIQUE INDEX requests_one_open ON requests (stage_id, action) WHERE status IN ('open', 'deferred');
CREATE INDEX requests_app_open ON requests (app) WHERE status IN ('open', 'deferred');

-- One row per Application Manager outcome for a request.
CREATE TABLE decisions (
    id             bigserial PRIMARY KEY,
    app            text NOT NULL,
    request_id     bigint REFERENCES requests (id) ON DELETE SET NULL,
    stage_id       text NOT NULL,
    action         text NOT NULL,
    outcome        text NOT NULL CHECK (outcome IN ('granted', 'declined', 'deferred')),
    reason         text NOT NULL,
    policy         text NOT NULL,
    tokens_before  double precision,
    tokens_after   double precision,
    defer_until    timestamptz,
    urgent         boolean NOT NULL DEFAULT false,
    response_ms    double precision,
    dry_run        boolean NOT NULL DEFAULT false,
    decided_by     text NOT NULL,                 -- 'replan' (Airflow or CLI), 'user', …
    decided_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX decisions_app_time ON decisions (app, decided_at DESC);

-- A planned change to a stage. Persisted as 'pending' before anything acts on it; the
-- execution step realizes it and fills in every phase timestamp.
CREATE TABLE reconfigurations (
    id                   bigserial PRIMARY KEY,
    stage_id             text NOT NULL REFERENCES stages (stage_id) ON DELETE CASCADE,
    app                  text NOT NULL,
    action               text NOT NULL CHECK (action IN ('scale_out', 'scale_in', 'migrate')),
    from_cores           integer,
    target_cores         integer,
    from_pool            text,
    target_pool          text,
    target_partitions    integer,
    mechanism            text,                    -- pause_resume | prestaged | active_backup (execution issue)
    status               text NOT NULL DEFAULT 'pending'
                         CHECK (status IN ('pending', 'running', 'done', 'failed', 'rolled_back', 'cancelled')),
    requested_by         text NOT NULL,           -- 'policy:<name>' or 'user:<name>'
    request_id           bigint REFERENCES requests (id) ON DELETE SET NULL,
    decision_id          bigint REFERENCES decisions (id) ON DELETE SET NULL,
    state_bytes          bigint,
    requested_at         timestamptz NOT NULL DEFAULT now(),
    stop_requested_at    timestamptz,
    stopped_at           timestamptz,
    state_ready_at       timestamptz,
    restarted_at         timestamptz,
    first_batch_done_at  timestamptz,
    caught_up_at         timestamptz,
    finished_at          timestamptz,
    outcome              text,
    rollback_reason      text,
    downtime_ms          double precision
);
-- One planned or running change per stage at a time.
CREATE UNIQUE INDEX reconfigurations_one_active ON reconfigurations (stage_id) WHERE status IN ('pending', 'running');

-- The Application Manager's memory between cycles.
CREATE TABLE app_control (
    app             text PRIMARY KEY REFERENCES apps (name) ON DELETE CASCADE,
    tokens          double precision NOT NULL,
    window_start    timestamptz,
    window_actions  integer NOT NULL DEFAULT 0,
    last_cycle_at   timestamptz,
    last_response_ms double precision
);

-- The Operator Manager's memory (pre-staged or not) between cycles.
CREATE TABLE operator_state (
    stage_id    text PRIMARY KEY REFERENCES stages (stage_id) ON DELETE CASCADE,
    prestaged   boolean NOT NULL DEFAULT false,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- The window query reads the last couple of minutes of every stage's batches: one range scan
-- on time, answered from the index alone (it covers every column the query reads).
CREATE INDEX stage_metrics_recent ON stage_metrics (ts)
    INCLUDE (stage_id, deployment_id, input_rows, batch_duration_ms, backlog_rows, latency_p95_ms, state_bytes);
