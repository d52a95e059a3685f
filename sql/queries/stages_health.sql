-- Every stage's app and health, for the watchdog (stages it gave up on are `failed`).
SELECT stage_id, app, health, health_reason FROM stages ORDER BY stage_id
