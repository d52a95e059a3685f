-- The driver's Spark UI (issue 30 part 3): its URL on loopback, e.g. http://127.0.0.1:4711. The
-- launcher records the port it chose; the driver, once its queries run, records the URL Spark
-- actually bound (sc.uiWebUrl: it moves to the next port if the chosen one was taken meanwhile).
-- NULL: the pool has `spark_ui: false`, or the row is older than this column.
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS ui_url text;
