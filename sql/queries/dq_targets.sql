-- What the nightly data-quality suites validate: every stage (of :app, or of every app) with its
-- registry spec (source and sink), and whether it reported metrics or wrote outputs on :day.
SELECT s.stage_id, s.app, s.job, s.spec,
       EXISTS (SELECT 1 FROM stage_metrics m WHERE m.stage_id = s.stage_id
               AND m.ts >= CAST(:day AS date)::timestamptz AND m.ts < (CAST(:day AS date) + 1)::timestamptz) AS has_metrics,
       EXISTS (SELECT 1 FROM sink_outputs o WHERE o.stage_id = s.stage_id
               AND o.written_at >= CAST(:day AS date)::timestamptz AND o.written_at < (CAST(:day AS date) + 1)::timestamptz) AS has_outputs
FROM stages s
WHERE CAST(:app AS text) IS NULL OR s.app = CAST(:app AS text)
ORDER BY s.app, s.stage_id
