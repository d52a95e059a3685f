-- A failure just recorded whose run turned out not to be hung (the database held its heartbeats
-- back): no failure. Only while it is open and nothing was restarted for it.
DELETE FROM failures WHERE id = :id AND status = 'recovering' AND attempts = 0
