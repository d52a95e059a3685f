-- One data-quality validation (streamops.quality): a GX suite run against one target.
INSERT INTO dq_results (suite, target, app, day, success, statistics, details)
VALUES (:suite, :target, :app, CAST(:day AS date), :success, CAST(:statistics AS jsonb), CAST(:details AS jsonb))
RETURNING id, run_at
