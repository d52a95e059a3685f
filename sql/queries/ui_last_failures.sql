-- Each stage's most recent failure, for the Airflow page's "last failure" column.
SELECT DISTINCT ON (stage_id) stage_id, kind, role, status, detected_at, recovered_at, mttr_ms, detail
FROM failures
ORDER BY stage_id, detected_at DESC, id DESC
