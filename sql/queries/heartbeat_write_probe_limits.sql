-- The write probe's limits, for its transaction only: a lock not granted, or a statement not done,
-- within :ms milliseconds is an error, not a wait.
SELECT set_config('lock_timeout', :ms, true), set_config('statement_timeout', :ms, true)
