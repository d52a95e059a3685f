-- bench/reporting.py: one day of reporting.cost_daily.
SELECT * FROM reporting.cost_daily WHERE day = :d
