-- This transaction's commit returns before its WAL is on disk: a server crash may lose it, never
-- corrupt it (a later waiting commit flushes it too). Only for metrics and heartbeats (docs/ha.md).
SET LOCAL synchronous_commit = off
