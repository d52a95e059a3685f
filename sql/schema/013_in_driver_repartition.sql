-- In-driver pause–resume (issue 13): a running driver is told to repartition its state between two
-- batches and restart its query in the same JVM (a `repartition` command); the run keeps its
-- deployment row, whose state_partitions follow the change.
ALTER TABLE stage_commands DROP CONSTRAINT stage_commands_command_check;
ALTER TABLE stage_commands ADD CONSTRAINT stage_commands_command_check
    CHECK (command IN ('stop', 'scale', 'repartition'));
