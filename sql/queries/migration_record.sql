INSERT INTO schema_migrations (version, name, checksum) VALUES (:v, :n, :c)
