-- A redeploy puts a given-up stage back under the watchdog's care.
UPDATE stages SET health = 'ok', health_reason = NULL WHERE stage_id = ANY(:stage_ids)
