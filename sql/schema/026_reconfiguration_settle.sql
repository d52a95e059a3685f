-- The re-plan reads each stage's last reconfiguration end (stage_windows.sql, stages_now.sql:
-- its window starts after it, and a request made before it is not granted): one index probe
-- per stage instead of a scan of every reconfiguration.
CREATE INDEX IF NOT EXISTS reconfigurations_stage_finished ON reconfigurations (stage_id, finished_at);
