-- A pool's size as deployed (the registry's, when it is at hand, is what admission uses).
SELECT cores FROM pools WHERE name = :pool
