-- Input files quarantined from the stage's failed batches (the ones that reproduced the failure
-- alone, else the whole batch): every run leaves them out.
SELECT query, unnest(COALESCE(quarantined_files, files)) AS file
FROM batch_failures WHERE stage_id = :stage_id AND status = 'quarantined'
