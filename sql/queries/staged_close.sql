UPDATE staged_checkpoints SET status = :status, closed_at = now() WHERE id = :id AND status = 'ready'
