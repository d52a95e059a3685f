-- The most recently written report, for `streamops status`.
SELECT id, day, app, path, created_at FROM reports ORDER BY created_at DESC, id DESC LIMIT 1
