-- Each app's latency bound, and how many stages share it (mpc prices a second above R_max per app)
SELECT a.name, a.r_max_ms, count(s.stage_id) AS stages
FROM apps a
LEFT JOIN stages s ON s.app = a.name
GROUP BY a.name, a.r_max_ms
