-- Input the file source did not fully read, found by the driver's input audit (agent/input_watch.py):
-- a file modified after a batch read it (the source never reads a file twice: what was written
-- after the read is not counted), or a sub-directory (never read). One row per stage, path and kind.
CREATE TABLE input_anomalies (
    stage_id      text NOT NULL REFERENCES stages (stage_id) ON DELETE CASCADE,
    path          text NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('changed_after_read', 'subdirectory')),
    detail        text NOT NULL,
    bytes_now     bigint,
    deployment_id bigint REFERENCES deployments (id) ON DELETE SET NULL,
    detected_at   timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stage_id, path, kind)
);
