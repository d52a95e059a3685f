INSERT INTO decisions (app, request_id, stage_id, action, outcome, reason, policy, tokens_before, tokens_after,
                       defer_until, urgent, response_ms, dry_run, decided_by)
VALUES (%(app)s, %(request_id)s, %(stage_id)s, %(action)s, %(outcome)s, %(reason)s, %(policy)s, %(tokens_before)s,
        %(tokens_after)s, %(defer_until)s, %(urgent)s, %(response_ms)s, %(dry_run)s, %(decided_by)s)
RETURNING id, request_id
