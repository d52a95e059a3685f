-- The checksum of the sql/reports/*.sql the `reporting` schema was last created from.
CREATE TABLE IF NOT EXISTS schema_reports (
    id         boolean PRIMARY KEY DEFAULT true CHECK (id),
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
