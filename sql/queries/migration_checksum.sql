SELECT checksum FROM schema_migrations WHERE version = :v
