-- The log files of live runs: housekeeping never removes them.
SELECT log_path FROM deployments WHERE status IN ('starting', 'running', 'stopping') AND log_path IS NOT NULL
