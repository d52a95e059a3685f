"""Detached background processes (streamops.processes): the data plane runs nicer than the
control plane, and the pid recorded is still the command's own."""

from __future__ import annotations

import psutil

from streamops import processes
from streamops.waiting import wait_until


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
        plain.kill()
        plain.wait(5)
    finally:
        processes.stop(proc.pid, grace_s=1, group=True)
