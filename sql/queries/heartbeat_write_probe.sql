-- The supervisor's write probe: what a driver's heartbeat writes, without a row. The lock a beat
-- takes on `heartbeats` (a migration's EXCLUSIVE lock holds it back, as it holds every beat) and a
-- transaction id, whose commit puts a record in the WAL (an fsync stall that fills the WAL buffers
-- holds that back too).
LOCK TABLE heartbeats IN ROW EXCLUSIVE MODE;
SELECT pg_current_xact_id()
