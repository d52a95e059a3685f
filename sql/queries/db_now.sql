-- The database's clock: the one clock that times compared across processes and hosts are read
-- from (failure times, output gaps, a reconfiguration's marks; docs/ha.md, "Clocks").
-- clock_timestamp(), not now(): this statement's time, not its transaction's start.
SELECT clock_timestamp()
