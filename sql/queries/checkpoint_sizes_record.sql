-- One measurement per stage (db.bulk), replacing the last; a stage deleted meanwhile is skipped.
INSERT INTO checkpoint_sizes (stage_id, bytes, disk_bytes, files, took_ms, measured_at)
SELECT v.stage_id, v.bytes, v.disk_bytes, v.files, v.took_ms, now()
FROM (VALUES (%(stage_id)s, %(bytes)s::bigint, %(disk_bytes)s::bigint, %(files)s::int, %(took_ms)s::float8))
     AS v (stage_id, bytes, disk_bytes, files, took_ms)
JOIN stages s ON s.stage_id = v.stage_id
ON CONFLICT (stage_id) DO UPDATE SET bytes = EXCLUDED.bytes, disk_bytes = EXCLUDED.disk_bytes,
    files = EXCLUDED.files, took_ms = EXCLUDED.took_ms, measured_at = EXCLUDED.measured_at
