-- A reconfiguration's output gap is the longest time between two commits around it, and a stage
-- that commits every 6-7 s shows that gap with no change at all: the stage's own commit interval
-- in the minute before the change is kept beside it, so that reporting.reconfigurations can give
-- the excess (what the change cost) as well as the raw gap.
ALTER TABLE reconfigurations ADD COLUMN IF NOT EXISTS commit_interval_ms double precision;
