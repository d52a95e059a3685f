-- A staged batch into the sink, in the transaction that writes its commit. The newest version per
-- key wins, as in sink_upsert.sql: an older version (late replica, stale replay) never wins, an
-- equal one does. Rows are taken in key order, the order every other writer locks them in.
WITH staged AS (
    DELETE FROM sink_staging
    WHERE stage_id = :stage_id AND deployment_id = :deployment_id AND batch_id = :batch_id
    RETURNING key, value, event_ts, version
), applied AS (
    INSERT INTO sink_outputs AS t (stage_id, key, value, event_ts, version, batch_id)
    SELECT DISTINCT ON (key) :stage_id, key, value, event_ts, version, :batch_id
    FROM staged ORDER BY key, version DESC
    ON CONFLICT (stage_id, key) DO UPDATE
        SET value = EXCLUDED.value, event_ts = EXCLUDED.event_ts, version = EXCLUDED.version,
            batch_id = EXCLUDED.batch_id, written_at = now()
        WHERE t.version <= EXCLUDED.version
    RETURNING 1
)
SELECT (SELECT count(*) FROM staged) AS staged, (SELECT count(*) FROM applied) AS applied
