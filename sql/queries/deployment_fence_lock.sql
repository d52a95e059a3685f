-- Admission locks the run it is about to fence: the stage's and role's newest run that was not
-- refused, whatever its status (a run marked failed may be a paused driver that wakes up). Its
-- sink commit holds that row FOR SHARE (sink_commit_lock.sql), so the two are ordered: the
-- commit ends before the new run exists, or it waits and is fenced by it.
SELECT id FROM deployments
WHERE stage_id = :stage_id AND role = :role AND status <> 'refused'
ORDER BY id DESC LIMIT 1
FOR NO KEY UPDATE
