-- A stage's catalog row.
SELECT * FROM stages WHERE stage_id = :stage_id
