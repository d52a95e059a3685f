-- A sink commit first holds its run's row FOR SHARE until COMMIT (then checks run_is_current in
-- its next statement). An admission of a newer run of the stage and role locks that row too
-- (deployment_fence_lock.sql), so either the admission waits for this commit, or this commit
-- waits for the admission and its check sees the new run: never a commit beside its successor.
SELECT id FROM deployments WHERE id = :deployment_id FOR SHARE
