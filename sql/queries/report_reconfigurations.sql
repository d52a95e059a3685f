-- reporting.reconfigurations requested on one day (and one app, or all): a CSV of the nightly
-- report, and the markers on its response-time charts.
SELECT * FROM reporting.reconfigurations
WHERE day = CAST(:day AS date) AND (CAST(:app AS text) IS NULL OR app = CAST(:app AS text))
ORDER BY requested_at, id
