-- As autovacuum would after a day of inserts: statistics, and the visibility map for index-only scans.
VACUUM ANALYZE
