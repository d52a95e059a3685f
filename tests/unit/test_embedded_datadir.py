"""Where the embedded cluster keeps its data when its owner cannot reach the checkout."""

from __future__ import annotations

from streamops.store import embedded


def test_two_homes_that_the_owner_cannot_reach_get_clusters_of_their_own(monkeypatch, tmp_path):
    """The soak found it: a temporary STREAMOPS_HOME (mkdtemp, 0700) put the cluster under a
    /var/tmp directory named for the checkout, so the next soak's home inherited the last one's
    data directory, with another password file, and the server refused every login."""
    monkeypatch.setattr(embedded, "_reachable_by", lambda owner, path: False)
    dirs = []
    for name in ("soak-a", "soak-b"):
        monkeypatch.setenv("STREAMOPS_HOME", str(tmp_path / name))
        dirs.append(embedded._pick_datadir("postgres"))
    assert dirs[0] != dirs[1] and all(str(d).startswith("/var/tmp/streamops-") for d in dirs)
    monkeypatch.setenv("STREAMOPS_HOME", str(tmp_path / "soak-a"))
    assert embedded._pick_datadir("postgres") == dirs[0], "the same home must find its cluster again"
