-- Each run of a replica set has its own checkpoint, so batch N of replica-1 is not batch N of the
-- primary: a failed batch is keyed by the run's role too, or one replica's failure (or its
-- 'quarantined' row) overwrites another's.
ALTER TABLE batch_failures ADD COLUMN role text NOT NULL DEFAULT 'primary';
ALTER TABLE batch_failures DROP CONSTRAINT batch_failures_pkey;
ALTER TABLE batch_failures ADD PRIMARY KEY (stage_id, role, query, batch_id);
