-- A batch that keeps failing is bisected by file before it is quarantined: only the files that
-- reproduce the failure on their own are quarantined and left out; the batch's other files are
-- counted by its replay. NULL: every file of the batch (none reproduced it alone).
ALTER TABLE batch_failures ADD COLUMN quarantined_files text[];
