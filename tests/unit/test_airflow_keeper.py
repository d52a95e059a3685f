"""Airflow's own process manager (`airflow_home.ComponentKeeper`), without Airflow: its components
are stood in for by fakes, real short-lived processes (`sleep`), so that its rules run in a
second. The real components are killed and restarted in test_airflow.py's REST test."""

from __future__ import annotations

import subprocess

from streamops import processes
from streamops.orchestrate import airflow_home


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_a_dead_component_is_restarted_one_that_keeps_dying_backs_off_and_one_stopped_on_purpose_is_left(
        tmp_path, monkeypatch):
    site = airflow_home.site(home=tmp_path / "airflow", database="unused", port=1)
    lifetimes = {"scheduler": "0", "triggerer": "600"}  # FAKE components: a scheduler that exits at once
    started: list[str] = []

    def fake_start(s, component, env):
        started.append(component)
        proc = processes.spawn_detached(["sleep", lifetimes[component]], log_path=airflow_home.log_file(s, component),
                                        pid_file=airflow_home._pid_file(s, component))
        if lifetimes[component] == "0":
            proc.wait()
        return proc.pid

    monkeypatch.setattr(airflow_home, "_start", fake_start)
    for c in ("scheduler", "triggerer"):  # both died; api-server and dag-processor were never started
        airflow_home._pid_file(site, c).parent.mkdir(parents=True, exist_ok=True)
        airflow_home._pid_file(site, c).write_text(f"{_dead_pid()}\n")
    clock = FakeClock()
    keep = airflow_home.ComponentKeeper(site, first_s=5, max_s=20, reset_after_s=60, clock=clock)
    said: list[str] = []
    try:
        assert sorted(keep(said.append)) == ["scheduler", "triggerer"]
        assert "action=restart-airflow airflow scheduler" in said[0]
        triggerer = processes.read_pid(airflow_home._pid_file(site, "triggerer"))
        assert triggerer is not None and processes.is_alive(triggerer)

        # The scheduler died again at once (the database is still away): tried again after 5 s,
        # then 10, then 20, never more often; the live triggerer is left alone.
        tries = []
        for _ in range(80):
            clock.now += 1
            if keep():
                tries.append(clock.now - 1000)
        assert tries == [5, 15, 35, 55, 75], tries
        assert processes.read_pid(airflow_home._pid_file(site, "triggerer")) == triggerer

        # `down` removes the pid files: nothing stopped on purpose is restarted.
        airflow_home.down(site, timeout_s=5)
        clock.now += 60
        assert keep() == [] and not processes.is_alive(triggerer)
    finally:
        for c in ("scheduler", "triggerer"):
            pid = processes.read_pid(airflow_home._pid_file(site, c))
            if pid and processes.is_alive(pid):
                processes.stop(pid, grace_s=1, group=True)
