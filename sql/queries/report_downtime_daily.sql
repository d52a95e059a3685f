-- reporting.downtime_daily for one day (and one app, or all): a CSV of the nightly report and its summary table.
SELECT * FROM reporting.downtime_daily
WHERE day = CAST(:day AS date) AND (CAST(:app AS text) IS NULL OR app = CAST(:app AS text))
ORDER BY app
