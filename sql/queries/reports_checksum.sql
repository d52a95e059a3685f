SELECT checksum FROM schema_reports
