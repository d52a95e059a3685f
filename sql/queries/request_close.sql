UPDATE requests SET status = :status, closed_at = CASE WHEN :status = 'deferred' THEN NULL ELSE now() END
WHERE id = :id
