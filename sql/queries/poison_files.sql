-- Input files of the stage's batches quarantined whole: every run leaves them out.
SELECT query, unnest(files) AS file FROM batch_failures WHERE stage_id = :stage_id AND status = 'quarantined'
