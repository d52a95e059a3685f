SELECT pg_advisory_unlock(hashtext('reconfigure:' || :stage_id))
