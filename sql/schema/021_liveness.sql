-- Liveness by more than a pid: the host the run was launched on (a pid means nothing on another
-- host; there the heartbeat decides) and the driver process's start time (a pid the kernel has
-- reused since is not the driver).
ALTER TABLE deployments ADD COLUMN pid_started_at double precision;
