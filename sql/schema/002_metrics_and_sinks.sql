-- One row per micro-batch per run (POLICIES.md §2), partitioned by day from the start so
-- that retention is a DROP of old partitions rather than a DELETE.
CREATE TABLE stage_metrics (
    ts                   timestamptz NOT NULL,       -- progress timestamp: when the batch started
    stage_id             text NOT NULL,
    deployment_id        bigint,
    run_id               text NOT NULL,              -- Spark's runId: new on every restart
    batch_id             bigint NOT NULL,
    input_rows           bigint NOT NULL,
    input_rps            double precision,
    processed_rps        double precision,
    batch_duration_ms    bigint NOT NULL,
    trigger_interval_ms  bigint,
    add_batch_ms         bigint,                     -- time inside the sink/processing, for the busy fraction
    backlog_files        bigint,
    backlog_rows         bigint,
    state_rows           bigint,
    state_bytes          bigint,
    output_rows          bigint,
    latency_p50_ms       double precision,           -- sink commit time minus event time
    latency_p95_ms       double precision,
    latency_max_ms       double precision,
    quarantined_rows     bigint NOT NULL DEFAULT 0,
    cores                integer,
    state_partitions     integer,
    durations            jsonb NOT NULL DEFAULT '{}', -- Spark's durationMs, whole
    PRIMARY KEY (stage_id, run_id, batch_id, ts)
) PARTITION BY RANGE (ts);

-- Rows outside every daily partition land here instead of failing the insert.
CREATE TABLE stage_metrics_default PARTITION OF stage_metrics DEFAULT;

CREATE INDEX stage_metrics_stage_ts ON stage_metrics (stage_id, ts DESC);

-- Create the daily partitions for [from_day, from_day + days). Idempotent.
CREATE FUNCTION ensure_stage_metrics_partitions(from_day date, days integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    d date;
    created integer := 0;
    part text;
BEGIN
    FOR i IN 0 .. days - 1 LOOP
        d := from_day + i;
        part := format('stage_metrics_%s', to_char(d, 'YYYYMMDD'));
        IF to_regclass(part) IS NULL THEN
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF stage_metrics FOR VALUES FROM (%L) TO (%L)',
                part, d::timestamptz, (d + 1)::timestamptz);
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END $$;

SELECT ensure_stage_metrics_partitions(current_date - 1, 3);

-- The PostgreSQL sink: one row per deterministic output key. Replays upsert the same keys.
-- `version` orders competing writes (a count, or the latest event time), so that a late or
-- replayed write never replaces a newer value: this keeps the sink safe for replicas too.
CREATE TABLE sink_outputs (
    stage_id    text NOT NULL,
    key         text NOT NULL,
    value       jsonb NOT NULL,
    event_ts    timestamptz,
    version     double precision NOT NULL DEFAULT 0,
    batch_id    bigint NOT NULL,
    written_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stage_id, key)
);

-- One row per committed output batch per run: the downtime ledger reads the gaps between these.
CREATE TABLE sink_commits (
    stage_id       text NOT NULL,
    deployment_id  bigint NOT NULL,
    batch_id       bigint NOT NULL,
    rows           bigint NOT NULL,
    committed_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stage_id, deployment_id, batch_id)
);
CREATE INDEX sink_commits_stage_time ON sink_commits (stage_id, committed_at);
