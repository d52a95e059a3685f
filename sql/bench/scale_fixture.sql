-- Synthetic control-plane load for `bench/scale.py`: :apps apps × :stages_per_app stages, all
-- running, each with :history_s seconds of batches every :trigger_s seconds up to :now.
-- Every 10th stage is overloaded (busy > trigger, backlog growing), so the cycle has requests
-- to decide; the rest are steady.
INSERT INTO pools (name, master, cores)
SELECT 'pool-' || p, 'local', 100000 FROM generate_series(0, 9) p;

INSERT INTO apps (name, r_max_ms, maintenance_window, spec)
SELECT 'app-' || a, 5000, '{"cron": "0 3 * * *", "duration_min": 60, "max_actions": 2}', '{}'
FROM generate_series(1, :apps) a;

INSERT INTO stages (stage_id, app, name, job, pool, cores, min_cores, max_cores, state_partitions, trigger_ms, spec)
SELECT 'app-' || a || '.s' || s, 'app-' || a, 's' || s, 'bench_jobs:count', 'pool-' || (a % 10), 2, 1, 8, 8, :trigger_s * 1000,
       jsonb_build_object('policy', jsonb_build_object('kind', (ARRAY['edf', 'threshold3', 'ds2'])[1 + (a + s) % 3]))
FROM generate_series(1, :apps) a, generate_series(1, :stages_per_app) s;

INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, status, running_at, started_at)
SELECT stage_id, pool, cores, state_partitions, '{}', 'local', '/bench/' || stage_id, 'running',
       CAST(:now AS timestamptz) - interval '2 hours', CAST(:now AS timestamptz) - interval '2 hours'
FROM stages;

INSERT INTO stage_metrics (ts, stage_id, deployment_id, run_id, batch_id, input_rows, input_rps, processed_rps,
                           batch_duration_ms, trigger_interval_ms, backlog_files, backlog_rows, state_rows, state_bytes,
                           output_rows, latency_p50_ms, latency_p95_ms, latency_max_ms, cores, state_partitions)
SELECT CAST(:now AS timestamptz) - make_interval(secs => k * :trigger_s),
       d.stage_id, d.id, 'run-' || d.id, (:history_s / :trigger_s) - k,
       (200 + 50 * random()) * :trigger_s, 220, 300,
       CASE WHEN hot THEN 1100 * :trigger_s ELSE (300 + 200 * random()) * :trigger_s END,
       :trigger_s * 1000, 0,
       CASE WHEN hot THEN 100 * ((:history_s / :trigger_s) - k) ELSE 0 END,
       10000, 5e6, 200,
       CASE WHEN hot THEN 4000 ELSE 800 END, CASE WHEN hot THEN 7000 ELSE 1500 END, 9000, 2, 8
FROM (SELECT id, stage_id, (id % 10 = 0) AS hot FROM deployments) d,
     generate_series(0, :history_s / :trigger_s - 1) k;
