-- reporting.ha_failures_daily for one day (and one app, or all): a CSV of the nightly report and a
-- table of its High availability section.
SELECT * FROM reporting.ha_failures_daily
WHERE day = CAST(:day AS date) AND (CAST(:app AS text) IS NULL OR app = CAST(:app AS text))
ORDER BY app, stage_id, cause, kind, fault_kind, detected_by
