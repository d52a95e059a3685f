-- bench/reporting.py: one day of reporting.reconfigurations.
SELECT * FROM reporting.reconfigurations WHERE day = :d
