"""The supervisor runs for months: it reads apps.yaml again when the file changes, so an app added
after it started is recovered and its deferred changes are kept to their window (a registry from
its start said the app did not exist). A bad edit keeps the last good registry."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from demo.stages import demo_job
from streamops.execute import supervisor as sup_mod


def _apps(path: Path, *names: str, mtime_ns: int) -> None:
    stage = {"pool": "p", "cores": {"initial": 1, "min": 1, "max": 2}}
    apps = {n: {"r_max_ms": 1000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                "stages": {"s": {**demo_job("wordcount", {"kind": "files", "path": f"{n}/s"}), **stage}}}
            for n in names}
    path.write_text(yaml.safe_dump({"pools": {"p": {"cores": 4}}, "apps": apps}))
    os.utime(path, ns=(mtime_ns, mtime_ns))  # a new mtime whatever the file system's resolution


def test_an_app_added_to_apps_yaml_reaches_the_running_supervisor_and_a_bad_edit_does_not(tmp_path, monkeypatch):
    f = tmp_path / "apps.yaml"
    _apps(f, "a", mtime_ns=1_000_000_000)
    monkeypatch.setenv("STREAMOPS_APPS", str(f))
    sup = sup_mod.Supervisor(opts=sup_mod.SupervisorOptions(warm_spares=False))
    assert set(sup._registry().apps) == {"a"}
    _apps(f, "a", "b", mtime_ns=2_000_000_000)
    assert set(sup._registry().apps) == {"a", "b"}, "an app added after the start"
    f.write_text("apps: [not, a, mapping")
    os.utime(f, ns=(3_000_000_000, 3_000_000_000))
    assert set(sup._registry().apps) == {"a", "b"}, "a bad edit keeps the last good registry"
