"""Reports over the `reporting` schema (sql/reports/) and the upkeep they need."""
