-- Is the run still its stage's and role's current one (fencing, 020_fencing.sql)?
SELECT run_is_current(CAST(:deployment_id AS bigint))
