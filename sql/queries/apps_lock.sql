-- Two concurrent re-plans of an app serialize here; the second sees the first's result.
-- Locks are taken in name order, so two multi-app re-plans cannot deadlock.
SELECT count(pg_advisory_xact_lock(hashtext('replan:' || name)))
FROM (SELECT name FROM apps WHERE name = ANY(CAST(:apps AS text[])) ORDER BY name) a
