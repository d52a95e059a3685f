-- The stage's open failure, if any (one per stage: a partial unique index).
SELECT id, attempts FROM failures WHERE stage_id = :stage_id AND status = 'recovering'
