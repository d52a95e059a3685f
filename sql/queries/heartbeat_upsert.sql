-- A run's heartbeat; none (and no row back) once the run is stale: the driver then exits.
-- beat_at is the database's clock when the row is written (clock_timestamp(), not now(): a beat
-- held back by a lock on `heartbeats` is dated when it got through, not when its transaction began).
-- beat_at comes back: the driver's offset from the database's clock (agent/metrics.ClockOffset).
INSERT INTO heartbeats (deployment_id, stage_id, beat_at, query_active, trigger_active, last_batch_id, info)
SELECT :deployment_id, :stage_id, clock_timestamp(), :query_active, :trigger_active, :last_batch_id, CAST(:info AS jsonb)
WHERE run_is_current(CAST(:deployment_id AS bigint))
ON CONFLICT (deployment_id) DO UPDATE
    SET beat_at = clock_timestamp(), query_active = EXCLUDED.query_active, trigger_active = EXCLUDED.trigger_active,
        last_batch_id = EXCLUDED.last_batch_id, info = EXCLUDED.info
RETURNING deployment_id, beat_at
