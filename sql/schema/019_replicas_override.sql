-- A deploy's replica count (the deploy DAG's `replicas` Param) outlives every later registry sync
-- (each start_stage syncs apps.yaml, and a failover starts the stage again): until the next deploy
-- without it. NULL: apps.yaml's count (or the redundancy manager's, for a managed stage).
ALTER TABLE stages ADD COLUMN replicas_override integer CHECK (replicas_override BETWEEN 1 AND 4);
