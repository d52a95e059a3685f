"""Loopback ports for the embedded servers (PostgreSQL, the Spark master and workers, the Kafka
broker, a driver's UI, a test's Airflow): one free now, and whether one can be listened on."""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A port free on `host` now (the kernel's choice); whoever binds it next gets it."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_free(port: int, host: str = LOOPBACK) -> bool:
    """Whether a server could listen on `port` now. With SO_REUSEADDR, as servers' listen sockets
    have it: the connections a stop leaves in TIME_WAIT do not hold the port then, only another
    listener does."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False
