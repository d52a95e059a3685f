-- Whether this session's commits wait for their WAL to reach disk (`on`) or return before (`off`).
SHOW synchronous_commit
