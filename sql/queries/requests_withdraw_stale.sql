UPDATE requests SET status = 'withdrawn', closed_at = now()
WHERE app = :app AND status IN ('open', 'deferred') AND refreshed_at <= now() - make_interval(secs => :stale_s)
