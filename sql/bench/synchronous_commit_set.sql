-- This session's synchronous_commit (`on` or `off`), whatever the server's default.
SELECT set_config('synchronous_commit', %(value)s, false)
