-- Failures the watchdog detected, and how each ended. One row per failed run of a stage.
-- Downtime and MTTR are measured, not estimated: the output gap runs from the stage's last sink
-- commit before the failure to the first commit of the run that recovered it.
CREATE TABLE failures (
    id                      bigserial PRIMARY KEY,
    stage_id                text NOT NULL REFERENCES stages (stage_id) ON DELETE CASCADE,
    app                     text NOT NULL,
    deployment_id           bigint REFERENCES deployments (id) ON DELETE SET NULL,  -- the run that failed
    kind                    text NOT NULL CHECK (kind IN ('stale_heartbeat', 'dead_pid', 'query_failed')),
    detail                  text NOT NULL,
    failed_at               timestamptz NOT NULL,  -- last sign of life: the run's last heartbeat, or its recorded end
    last_commit_at          timestamptz,          -- the last output before the failure (start of the output gap)
    detected_at             timestamptz NOT NULL DEFAULT now(),
    attempts                integer NOT NULL DEFAULT 0,   -- restarts tried for this failure
    recovery_deployment_id  bigint REFERENCES deployments (id) ON DELETE SET NULL,
    recovered_at            timestamptz,          -- first commit of the recovering run
    status                  text NOT NULL DEFAULT 'recovering'
                            CHECK (status IN ('recovering', 'recovered', 'gave_up')),
    closed_at               timestamptz,
    -- Time to recovery: the failure (failed_at) to the first output of the recovering run.
    mttr_ms                 double precision,
    -- The output gap the failure caused (last commit before it → first commit after it).
    downtime_ms             double precision
);
-- One open failure per stage: the watchdog updates it on every later cycle instead of adding rows.
CREATE UNIQUE INDEX failures_one_open ON failures (stage_id) WHERE status = 'recovering';
CREATE INDEX failures_app_time ON failures (app, detected_at);

-- A stage the watchdog gave up on (N failed restarts in a row) stays 'failed' until someone
-- deploys it again; the alert is this row plus the failed Airflow task.
ALTER TABLE stages ADD COLUMN IF NOT EXISTS health text NOT NULL DEFAULT 'ok'
    CHECK (health IN ('ok', 'failed'));
ALTER TABLE stages ADD COLUMN IF NOT EXISTS health_reason text;
