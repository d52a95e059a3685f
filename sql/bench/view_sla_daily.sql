-- bench/reporting.py: one day of reporting.sla_daily.
SELECT * FROM reporting.sla_daily WHERE day = :d
