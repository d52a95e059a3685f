INSERT INTO pools (name, master, cores, network_delay_ms)
VALUES (:name, :master, :cores, CAST(:network_delay_ms AS jsonb))
ON CONFLICT (name) DO UPDATE
    SET master = EXCLUDED.master, cores = EXCLUDED.cores, network_delay_ms = EXCLUDED.network_delay_ms, updated_at = now()
