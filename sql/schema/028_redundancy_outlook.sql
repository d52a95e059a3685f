-- The redundancy manager's proactive rule and start-up hold in production (issue 29): whether the
-- fault-rate estimate asked for the extra replica, and until when no decrease is allowed because
-- the replica it added is still starting.
ALTER TABLE redundancy_states ADD COLUMN IF NOT EXISTS proactive boolean NOT NULL DEFAULT false;
ALTER TABLE redundancy_states ADD COLUMN IF NOT EXISTS hold_until timestamptz;
