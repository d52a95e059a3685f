-- bench/synchronous_commit.py: one row per commit, ids in the order the commits were acknowledged.
CREATE TABLE commit_scratch (id bigint PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp())
