-- A request not refreshed for :stale_s seconds has lost its condition: its Operator Manager
-- stopped asking. It is withdrawn rather than decided.
UPDATE requests SET status = 'withdrawn', closed_at = now()
WHERE app = ANY(CAST(:apps AS text[])) AND status IN ('open', 'deferred')
  AND refreshed_at <= CAST(:now AS timestamptz) - make_interval(secs => :stale_s)
