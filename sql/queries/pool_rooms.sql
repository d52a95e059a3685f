-- Every pool with its size, network delays to the others, and the cores its live runs hold.
SELECT p.name, p.cores, p.network_delay_ms, COALESCE(u.used, 0) AS used
FROM pools p
LEFT JOIN (SELECT pool, sum(cores) AS used FROM deployments
           WHERE status IN ('starting', 'running', 'stopping') GROUP BY pool) u ON u.pool = p.name
