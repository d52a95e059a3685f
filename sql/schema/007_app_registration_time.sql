-- When an app was registered: the reports' observed time of a day starts here, not at midnight.
-- Existing apps get the earliest trace they left (first run, or their last update).
ALTER TABLE apps ADD COLUMN created_at timestamptz;
UPDATE apps a
SET created_at = LEAST(a.updated_at, (SELECT min(d.started_at) FROM deployments d JOIN stages s USING (stage_id)
                                      WHERE s.app = a.name));
ALTER TABLE apps ALTER COLUMN created_at SET DEFAULT now(), ALTER COLUMN created_at SET NOT NULL;
