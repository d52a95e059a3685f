"""The platform's PostgreSQL roles beside the superuser, and URLs that connect as them.

Each reader of the database gets only what it needs (issue 44 item 11), so a hole in one (an
injection in the page, a leaked exporter URL) cannot write or reach another's data:

- `streamops_reader`: analysts; SELECT on the `reporting` and `sinks` schemas (sql/reports/90_grants.sql).
- `streamops_observer`: the Streams page, `/metrics` and `streamops status` (store/observe);
  SELECT on the tables they show (sql/schema/041_observer_role.sql), no write, no function.
- `streamops_airflow`: Airflow's metadata; owns its database, no privilege on the platform's.

On the embedded cluster each has a password in the cluster's password file, which `db up`
generates and sets; elsewhere an administrator creates them (docs/architecture.md).
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit, urlunsplit

READER = "streamops_reader"
OBSERVER = "streamops_observer"
AIRFLOW = "streamops_airflow"
LOGIN_ROLES = (READER, OBSERVER, AIRFLOW)


def names_passfile(url: str) -> bool:
    """Whether `url` takes its password from a libpq password file (the embedded cluster's URLs
    do): then every role's password is there, and the URL can switch role."""
    return "passfile" in parse_qs(urlsplit(url).query)


def as_role(url: str, role: str) -> str:
    """`url` connecting as `role`: same server, database and query, no password of its own
    (the password file supplies it)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))
