INSERT INTO reports (day, app, path, duration_ms, summary)
VALUES (CAST(:day AS date), :app, :path, :duration_ms, CAST(:summary AS jsonb))
RETURNING id, created_at
