"""Loopback ports for the processes a test starts."""

from __future__ import annotations

import socket

_used_ports: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` now, never handed out twice in this process."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        if port not in _used_ports:
            _used_ports.add(port)
            return port
    raise RuntimeError("no free port found after 50 tries")


def listen_backlog(port: int) -> int:
    """The backlog of the TCP socket listening on `port` (Linux `ss`: Send-Q of a listener)."""
    import subprocess

    out = subprocess.run(
        ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, timeout=30, check=True
    ).stdout.split()
    if len(out) < 3:
        raise RuntimeError(f"nothing listens on port {port}")
    return int(out[2])
