-- The input audit found (or found again, changed further) a file the source did not fully read.
INSERT INTO input_anomalies (stage_id, path, kind, detail, bytes_now, deployment_id)
VALUES (:stage_id, :path, :kind, :detail, :bytes_now, :deployment_id)
ON CONFLICT (stage_id, path, kind) DO UPDATE
    SET detail = EXCLUDED.detail, bytes_now = EXCLUDED.bytes_now, deployment_id = EXCLUDED.deployment_id,
        updated_at = now()
