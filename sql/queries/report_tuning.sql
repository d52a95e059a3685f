-- One pass over a day's partition: JIT compiling costs more than it saves (0.4 s of 1.1 s for
-- 10 stages), and a little more memory keeps the per-bucket sort off disk. Scoped to the transaction.
SET LOCAL jit = off;
SET LOCAL work_mem = '64MB'
