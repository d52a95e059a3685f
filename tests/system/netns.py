"""Hosts for the multi-host test: Linux network namespaces on one bridge, each with its own
address, loopback and routing, as separate machines on one network would have (`ip netns`,
veth pairs). The file system stays shared, as a cluster's shared storage would be. Needs root
(CI runs as root) and iproute2."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    if shutil.which("ip") is None:
        return "no `ip` (iproute2)"
    probe = "so-probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@dataclass(frozen=True)
class Network:
    """A bridge (`gateway`, in this namespace: the database's host) and named hosts behind it."""

    bridge: str
    gateway: str
    prefix: int
    hosts: dict[str, str]  # namespace name -> address

    @property
    def cidr(self) -> str:
        return f"{self.gateway}/{self.prefix}"

    def netns(self, name: str) -> list[str]:
        """The command prefix that runs a program on host `name`."""
        return ["ip", "netns", "exec", name]

    def pids(self, name: str) -> list[int]:
        out = _ip("netns", "pids", name, check=False).stdout.split()
        return [int(p) for p in out]

    def host_of(self, pid: int) -> str | None:
        """The namespace a process runs in (None: this one)."""
        return _ip("netns", "identify", str(pid), check=False).stdout.strip() or None


def create(bridge: str, subnet: str, names: dict[str, int]) -> Network:
    """The bridge at `subnet`.1/24 and a namespace per name at `subnet`.<n>, each with its
    loopback up (a host's own loopback: the Python workers talk to their executor on it)."""
    destroy(bridge, list(names))  # what an aborted run left
    gateway = f"{subnet}.1"
    _ip("link", "add", bridge, "type", "bridge")
    _ip("addr", "add", f"{gateway}/24", "dev", bridge)
    _ip("link", "set", bridge, "up")
    hosts = {}
    for name, n in names.items():
        address, veth = f"{subnet}.{n}", f"{bridge}-{n}"
        _ip("netns", "add", name)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name)
        _ip("link", "set", veth, "master", bridge, "up")
        _ip("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", name, "link", "set", "eth0", "up")
        _ip("-n", name, "link", "set", "lo", "up")
        hosts[name] = address
    return Network(bridge, gateway, 24, hosts)


def destroy(bridge: str, names: list[str]) -> None:
    """Kill every process left on the hosts, then remove them and the bridge."""
    for name in names:
        out = _ip("netns", "pids", name, check=False).stdout.split()
        for pid in out:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        _ip("netns", "del", name, check=False)
    _ip("link", "del", bridge, check=False)
