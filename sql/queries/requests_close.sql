UPDATE requests r SET status = v.status, closed_at = CASE WHEN v.status = 'deferred' THEN NULL ELSE now() END
FROM (VALUES (%(id)s, %(status)s)) AS v (id, status)
WHERE r.id = v.id
