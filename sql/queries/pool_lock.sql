-- Admission reads then writes the pool's core budget: serialize it per pool (until commit).
SELECT pg_advisory_xact_lock(hashtext('pool:' || :pool))
