INSERT INTO decisions (app, request_id, stage_id, action, outcome, reason, policy, tokens_before, tokens_after,
                       defer_until, urgent, response_ms, dry_run, decided_by)
VALUES %s
RETURNING id
