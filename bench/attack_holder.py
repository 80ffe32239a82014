"""One attack's connections, held in a process of their own until stdin closes.

The acceptance bench (`bench/attacks_apiserver.py`) runs each attacker here so that its TLS
handshakes and its polling do not share an interpreter (and its GIL) with the legitimate
client being measured. Once a second it prints one JSON line: how many connections it opened
and how many the server closed (re-opened at once).

    python bench/attack_holder.py idle-tls PORT COUNT      # GET /healthz, then idle (TLS)
    python bench/attack_holder.py idle-tcp PORT COUNT      # connect, send nothing
    python bench/attack_holder.py slowloris PORT COUNT     # a head one byte a second
    python bench/attack_holder.py burst PORT COUNT         # COUNT connects at once, each second
    python bench/attack_holder.py hellos PORT COUNT        # half a ClientHello, from 8 addresses
    python bench/attack_holder.py slow-body PORT COUNT     # a body a byte every 2 s, 100 addresses
    python bench/attack_holder.py pipeline PORT COUNT      # GET /healthz 200 at a time (TLS)
"""

from __future__ import annotations

import json
import ssl
import sys
import threading
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.slow_clients import (
    ConnectBurst,
    HalfOpenConnections,
    IdleKeepAlive,
    Pipelining,
    SlowBodies,
    Slowloris,
    loopback_sources,
)


def _client_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def holder(kind: str, port: int, count: int) -> Any:
    """The `tests/support/slow_clients` holder of `kind`."""
    if kind == "idle-tls":
        return IdleKeepAlive(port, count, _client_context())
    if kind == "idle-tcp":
        return HalfOpenConnections(port, partial=0, idle=count)
    if kind == "slowloris":
        return Slowloris(port, count)
    if kind == "burst":
        return ConnectBurst(port, count)
    if kind == "hellos":
        return HalfOpenConnections(port, partial=count, idle=0, sources=loopback_sources(8))
    if kind == "slow-body":
        return SlowBodies(port, count, sources=loopback_sources(100))
    if kind == "pipeline":
        return Pipelining(port, count)
    raise SystemExit(
        f"attack_holder: unknown kind {kind!r} "
        "(idle-tls, idle-tcp, slowloris, burst, hellos, slow-body, pipeline)"
    )


def status(held: Any) -> dict[str, int]:
    if isinstance(held, IdleKeepAlive):
        return {"opened": held.opened, "dropped": held.dropped}
    if isinstance(held, ConnectBurst):
        return {"opened": held.opened, "dropped": held.failed, "slow": held.slow}
    if isinstance(held, HalfOpenConnections):
        return {"opened": sum(s is not None for s in held.socks), "dropped": held.dropped}
    if isinstance(held, SlowBodies):
        return {
            "opened": held.opened,
            "dropped": held.dropped,
            "continues": held.continues,
            "refusals": held.refusals,
        }
    if isinstance(held, Pipelining):
        return {"opened": held.opened, "dropped": held.dropped, "answered": held.answered}
    return {"opened": held.count, "dropped": held.dropped}


def main() -> None:
    kind, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    done = threading.Event()

    def wait_stdin() -> None:
        sys.stdin.read()  # the parent closes our stdin (or exits) to end the attack
        done.set()

    threading.Thread(target=wait_stdin, daemon=True).start()
    held = holder(kind, port, count)
    manager: AbstractContextManager[Any] = held
    with manager:
        for _ in range(24 * 3600):  # bounded: a day of one-second ticks
            print(json.dumps(status(held)), flush=True)
            if done.wait(1.0):
                break


if __name__ == "__main__":
    main()
