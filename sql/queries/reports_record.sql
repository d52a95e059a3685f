INSERT INTO schema_reports (checksum) VALUES (:c)
ON CONFLICT (id) DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = now()
