-- A stage's latest run in `role` (primary, or a replica's) (never a refused one): when `live`, only a live one (starting,
-- running, stopping); when `before` is given, the latest that started before it (the
-- configuration a reconfiguration requested then replaces). One lookup for stages, mechanisms and recovery.
SELECT * FROM deployments
WHERE stage_id = :stage_id AND role = CAST(:role AS text) AND status <> 'refused'
  AND (NOT CAST(:live AS boolean) OR status IN ('starting', 'running', 'stopping'))
  AND (CAST(:before AS timestamptz) IS NULL OR started_at < CAST(:before AS timestamptz))
ORDER BY started_at DESC
LIMIT 1
