"""Detached background processes (streamops.processes): the data plane runs nicer than the
control plane, and the pid recorded is still the command's own."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from streamops import processes
from streamops.waiting import wait_until


def _autogroup_on() -> bool:
    return processes.AUTOGROUP.exists() and processes.AUTOGROUP.read_text().strip() == "1"


def _autogroup_nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])  # "/autogroup-123 nice 5"


def test_a_niced_process_keeps_its_own_pid_and_its_children_inherit_the_niceness(tmp_path):
    proc = processes.spawn_detached(["sh", "-c", "sleep 30 & wait"], log_path=tmp_path / "log", nice=5)
    try:
        p = psutil.Process(proc.pid)
        assert wait_until(lambda: p.cmdline()[:2] == ["sh", "-c"], 10), "nice(1) execs: the pid is the command's"
        assert p.nice() == psutil.Process().nice() + 5
        children = wait_until(lambda: p.children(), 10)
        assert children and all(c.nice() == p.nice() for c in children), "a worker's executors inherit it"
        plain = processes.spawn_detached(["sleep", "30"], log_path=tmp_path / "log2")
        assert psutil.Process(plain.pid).nice() == psutil.Process().nice(), "the control plane stays as it was"
        if _autogroup_on():
            # Each session its own scheduling group: only the group's niceness weighs against the others.
            assert _autogroup_nice(proc.pid) == 5 and _autogroup_nice(plain.pid) == 0
        plain.kill()
        plain.wait(5)
    finally:
        processes.stop(proc.pid, grace_s=1, group=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="lowering a thread's nice value needs root")
def test_a_spare_built_nicer_is_given_the_data_plane_s_priority_whole_when_adopted(tmp_path):
    proc = processes.spawn_detached(["sh", "-c", "sleep 30 & sleep 30 & wait"], log_path=tmp_path / "log", nice=10)
    try:
        p = psutil.Process(proc.pid)
        assert wait_until(lambda: len(p.children()) == 2, 10)
        processes.renice(proc.pid, 0)
        assert all(psutil.Process(t.id).nice() == 0 for q in (p, *p.children()) for t in q.threads())
        if _autogroup_on():
            assert _autogroup_nice(proc.pid) == 0
    finally:
        processes.stop(proc.pid, grace_s=1, group=True)


def test_a_pid_file_s_process_is_stopped_and_its_file_removed(tmp_path, monkeypatch):
    """`down`'s supervisor and `gen --stop`'s generators: stopped through their pid files, which go
    with them (stopped on purpose: nothing restarts them); a stale file is only removed."""
    monkeypatch.setenv("STREAMOPS_HOME", str(tmp_path))
    pid_file = tmp_path / "run" / "sleeper.pid"
    proc = processes.spawn_detached(["sleep", "30"], log_path=tmp_path / "log", pid_file=pid_file)
    gens = {sid: processes.spawn_detached(["sleep", "30"], log_path=tmp_path / f"{sid}.log",
                                          pid_file=tmp_path / "run" / f"gen-{sid}.pid") for sid in ("a.x", "a.y")}
    try:
        assert processes.stop_pid_file(pid_file, grace_s=5) == proc.pid and not pid_file.exists()
        assert processes.stop_pid_file(pid_file, grace_s=5) is None
        assert processes.stop_generators("a.x") == ["a.x"] and proc.wait(5) is not None
        assert gens["a.x"].wait(5) is not None and gens["a.y"].poll() is None, "only the stage asked for"
        assert processes.stop_generators() == ["a.y"] and gens["a.y"].wait(5) is not None
        assert processes.stop_generators() == [] and not list((tmp_path / "run").glob("gen-*.pid"))
    finally:
        for p in (proc, *gens.values()):
            p.kill()


@pytest.mark.skipif(os.geteuid() != 0, reason="lowering a thread's nice value needs root")
def test_a_spare_still_building_niced_after_its_limit_gets_the_data_plane_s_priority(tmp_path, monkeypatch):
    from streamops.execute import launcher

    proc = processes.spawn_detached(["sleep", "30"], log_path=tmp_path / "log", nice=launcher.SPARE_NICE,
                                    stdin_pipe=True)
    spare = launcher.Spare("a.s", 1, proc, str(tmp_path / "log"), tmp_path / "ready", niced=True)
    try:
        # nice(1) sets the niceness, then execs: read before that, it is the parent's (a loaded machine)
        assert wait_until(lambda: psutil.Process(proc.pid).cmdline()[:1] == ["sleep"], 10), "nice(1) has exec'd"
        spare.hurry_if_slow()
        niced = min(19, psutil.Process().nice() + launcher.SPARE_NICE)
        assert spare.niced and psutil.Process(proc.pid).nice() == niced, "within its limit"
        monkeypatch.setattr(launcher, "SPARE_NICE_AT_MOST_S", 0.0)
        spare.hurry_if_slow()
        assert not spare.niced and psutil.Process(proc.pid).nice() == processes.DATA_PLANE_NICE
        if _autogroup_on():
            assert _autogroup_nice(proc.pid) == processes.DATA_PLANE_NICE
    finally:
        proc.kill()
        proc.wait(5)
