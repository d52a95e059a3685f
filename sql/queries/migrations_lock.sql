-- Every process that migrates takes the same transaction-level lock first.
SELECT pg_advisory_xact_lock(:k)
