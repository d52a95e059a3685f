-- The newest failure's id (0 when there is none): where the failure-events trigger starts
-- watching, so that failures recorded before it started do not fire.
SELECT COALESCE(max(id), 0) FROM failures
