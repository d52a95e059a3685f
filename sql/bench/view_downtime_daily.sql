-- bench/reporting.py: one day of reporting.downtime_daily.
SELECT * FROM reporting.downtime_daily WHERE day = :d
