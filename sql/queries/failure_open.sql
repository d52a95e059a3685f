-- The open failure of one replica of a stage, if any (one per stage and role: a partial unique index).
SELECT id, attempts, kind FROM failures WHERE stage_id = :stage_id AND role = :role AND status = 'recovering'
