-- A fault the injector is about to cause (written first: a driver kill leaves it behind).
INSERT INTO injected_faults (stage_id, deployment_id, role, kind, magnitude_s, source, detail)
VALUES (:stage_id, :deployment_id, :role, :kind, :magnitude_s, :source, :detail)
RETURNING id
