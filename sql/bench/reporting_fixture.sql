-- Synthetic day for `bench/reporting.py`: :stages stages in apps of 10, registered before :day,
-- one batch per stage per second for the whole day (86 400 × :stages stage_metrics rows), a
-- reconfiguration and a failure per app. Latencies follow a slow wave with bursts, so that some
-- seconds exceed R_max and the views have work to do.
INSERT INTO pools (name, master, cores) VALUES ('bench', 'local', 100000);

INSERT INTO apps (name, r_max_ms, maintenance_window, spec, created_at)
SELECT 'app-' || a, 5000, '{"cron": "0 3 * * *", "duration_min": 60, "max_actions": 2}', '{}',
       CAST(:day AS date) - 1
FROM generate_series(1, (:stages + 9) / 10) a;

INSERT INTO stages (stage_id, app, name, job, pool, cores, min_cores, max_cores, state_partitions, trigger_ms, spec)
SELECT 'app-' || (1 + s / 10) || '.s' || s, 'app-' || (1 + s / 10), 's' || s, 'bench_jobs:count', 'bench', 2, 1, 8, 8, 1000, '{}'
FROM generate_series(0, :stages - 1) s;

INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, status,
                         started_at, running_at, stopped_at)
SELECT stage_id, pool, cores, state_partitions, '{}', 'local', '/bench/' || stage_id, 'stopped',
       CAST(:day AS date) - 1, CAST(:day AS date) - 1, CAST(:day AS date) + 1
FROM stages;

INSERT INTO stage_metrics (ts, stage_id, deployment_id, run_id, batch_id, input_rows, input_rps, processed_rps,
                           batch_duration_ms, trigger_interval_ms, backlog_rows, state_bytes, output_rows,
                           latency_p50_ms, latency_p95_ms, latency_max_ms, cores, state_partitions)
SELECT CAST(:day AS date) + make_interval(secs => k + 0.01 * (d.id % 50)),
       d.stage_id, d.id, 'run-' || d.id, k, 200, 200, 250, 400 + (k % 300), 1000, 0, 5e6, 200,
       lat * 0.5, lat, lat * 1.4, 2, 8
FROM deployments d,
     generate_series(0, 86399) k,
     -- a 2-hour wave between 250 and 550 ms per stage, and a 30 s burst of 3 s every 10 minutes
     LATERAL (SELECT 400 + 150 * sin(k / 1146.0 + d.id) + CASE WHEN k % 600 < 30 THEN 3000 ELSE 0 END AS lat) l;

-- Per app: one scale-out of its first stage at 03:00 with 7 s of downtime, and one failure at
-- 15:00 with 40 s of downtime.
INSERT INTO reconfigurations (stage_id, app, action, from_cores, target_cores, mechanism, status, requested_by,
                              requested_at, stop_requested_at, stopped_at, restarted_at, first_batch_done_at,
                              finished_at, outcome, downtime_ms)
SELECT DISTINCT ON (app) stage_id, app, 'scale_out', 2, 3, 'pause_resume', 'done', 'policy:edf',
       CAST(:day AS date) + interval '3 hours', CAST(:day AS date) + interval '3:00:01',
       CAST(:day AS date) + interval '3:00:03', CAST(:day AS date) + interval '3:00:06',
       CAST(:day AS date) + interval '3:00:08', CAST(:day AS date) + interval '3:00:09', 'done', 7000
FROM stages ORDER BY app, stage_id;

INSERT INTO failures (stage_id, app, kind, detail, failed_at, last_commit_at, detected_at, status, recovered_at,
                      closed_at, mttr_ms, downtime_ms)
SELECT DISTINCT ON (app) stage_id, app, 'dead_pid', 'bench', CAST(:day AS date) + interval '15:00:01',
       CAST(:day AS date) + interval '15 hours',
       CAST(:day AS date) + interval '15:00:10', 'recovered', CAST(:day AS date) + interval '15:00:40',
       CAST(:day AS date) + interval '15:00:40', 39000, 40000
FROM stages ORDER BY app, stage_id;
