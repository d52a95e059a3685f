-- One executor per stage: a session-level lock, held by a connection kept for the whole execution.
SELECT pg_try_advisory_lock(hashtext('reconfigure:' || :stage_id))
