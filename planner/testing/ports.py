"""Loopback ports for test services, picked where nothing else will take them before they are bound.

A port from ``bind(0)`` comes out of the kernel's ephemeral range, the same range every outgoing connection
and every other ``bind(0)`` draws from. Between picking it and the service binding it (Prometheus is started
first so that the controller can be given its URL), a client connection of another thread could take it,
and the controller then fails to start on a port that was free when it was picked. So ports are drawn at
random from below the ephemeral range (which outgoing connections never use), checked bindable, and never
handed out twice by this process. Under pytest-xdist each worker process draws from its own share of that
range (PYTEST_XDIST_WORKER gwN of PYTEST_XDIST_WORKER_COUNT), so two workers never pick the same port.
"""
from __future__ import annotations

import os
import random
import socket
import threading
from collections.abc import Mapping
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 20000  # above the well-known and most registered service ports
ATTEMPTS = 200
MIN_SHARE = 100  # a narrower range is not split between xdist workers

_given: set[int] = set()
_lock = threading.Lock()
_rng = random.Random()


def ephemeral_low(path: Path = EPHEMERAL_RANGE_FILE) -> int | None:
    """The first port of the kernel's ephemeral range, or None where it cannot be read (not Linux)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _kernel_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def worker_share(lowest: int, highest: int, env: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """The part of [lowest, highest] this process draws from: all of it, or one xdist worker's slice."""
    worker, count = env.get("PYTEST_XDIST_WORKER", ""), env.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 1):
        return lowest, highest
    index, n = int(worker[2:]), int(count)
    width = (highest - lowest + 1) // n
    if width < MIN_SHARE or index >= n:
        return lowest, highest
    return lowest + index * width, lowest + (index + 1) * width - 1


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` that is free now, outside the ephemeral range, and not given out before."""
    low = ephemeral_low()
    with _lock:
        if low is not None and low - 1 > LOWEST_PORT:
            first, last = worker_share(LOWEST_PORT, low - 1)
            for _ in range(ATTEMPTS):
                port = _rng.randint(first, last)
                if port not in _given and _bindable(host, port):
                    _given.add(port)
                    return port
        # No room below the ephemeral range (or it is unknown): fall back to the kernel's pick.
        port = _kernel_port(host)
        _given.add(port)
        return port
