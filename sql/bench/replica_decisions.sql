-- The redundancy manager's add/remove replica decisions by outcome.
SELECT action, outcome, count(*) AS n FROM decisions WHERE action LIKE '%replica' GROUP BY 1, 2 ORDER BY 1, 2
