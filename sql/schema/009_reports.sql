-- Nightly reports (`streamops report`, the streamops_nightly_report DAG): one row per report
-- written, so `streamops status` and operators can find the last one without walking reports/.
CREATE TABLE reports (
    id           bigserial PRIMARY KEY,
    day          date NOT NULL,                 -- the day reported (server TimeZone, as reporting.*)
    app          text,                          -- the --app filter; NULL = every app
    path         text NOT NULL,                 -- absolute path of index.html
    created_at   timestamptz NOT NULL DEFAULT now(),
    duration_ms  double precision,              -- time to build it, queries and charts included
    summary      jsonb NOT NULL DEFAULT '{}'    -- {"apps": {app: summary-table figures}, "dq": {...}}
);
CREATE INDEX reports_created ON reports (created_at DESC);
CREATE INDEX reports_day ON reports (day, app);

-- Data-quality results (Great Expectations suites, issue 6): one row per validation of a suite
-- against a target. The nightly report shows the latest row per (suite, target) of the day.
--   statistics: GX's validation statistics, e.g. {"evaluated_expectations": 12,
--               "successful_expectations": 11, "unsuccessful_expectations": 1, "success_percent": 91.7}
--   details:    what failed, e.g. {"failed": [{"expectation": "expect_column_values_to_be_between",
--               "column": "input_rps", "observed": "3 of 86400 rows below 0"}]}
CREATE TABLE dq_results (
    id          bigserial PRIMARY KEY,
    suite       text NOT NULL,                  -- e.g. stage_metrics, input_records, sink_outputs
    target      text NOT NULL,                  -- what was validated: a table, a stage id, a Parquet path
    app         text,                           -- the app the target belongs to, if any
    day         date NOT NULL,                  -- the data day validated
    success     boolean NOT NULL,
    statistics  jsonb NOT NULL DEFAULT '{}',
    details     jsonb NOT NULL DEFAULT '{}',
    run_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dq_results_day ON dq_results (day, suite, target, run_at DESC);
