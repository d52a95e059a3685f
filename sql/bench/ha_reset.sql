-- bench/ha.py: a clean slate between setups (no runs, no rows); the catalog stays.
DELETE FROM sink_outputs;
DELETE FROM sink_commits;
DELETE FROM stage_metrics;
DELETE FROM failures;
DELETE FROM injected_faults;
DELETE FROM heartbeats;
DELETE FROM stage_commands;
DELETE FROM decisions;
DELETE FROM requests;
DELETE FROM redundancy_states;
DELETE FROM deployment_scaling;
DELETE FROM deployments
