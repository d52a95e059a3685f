-- One written report, for the Airflow page's report links (its folder holds index.html and CSVs).
SELECT id, day, app, path, created_at FROM reports WHERE id = :id
