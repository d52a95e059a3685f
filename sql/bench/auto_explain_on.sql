-- bench/reporting.py: the plans of the statements inside a view's function, as notices.
LOAD 'auto_explain';
SET auto_explain.log_min_duration = 0;
SET auto_explain.log_analyze = on;
SET auto_explain.log_buffers = on;
SET auto_explain.log_nested_statements = on;
SET auto_explain.log_level = notice;
SET client_min_messages = notice
