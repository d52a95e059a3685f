-- The watchdog gives up: the failure is closed and the stage is marked failed until a redeploy.
WITH f AS (
    UPDATE failures SET status = 'gave_up', closed_at = now() WHERE id = :id RETURNING stage_id
)
UPDATE stages s SET health = 'failed', health_reason = :reason FROM f WHERE s.stage_id = f.stage_id
