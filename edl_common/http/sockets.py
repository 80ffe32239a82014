"""Listening sockets with the backlog asked for, and an open-files limit to match the caps."""

from __future__ import annotations

import errno
import logging
import resource
import socket

log = logging.getLogger(__name__)


class ListenError(Exception):
    """The address cannot be listened on; the message says why in one line."""


def listen(host: str, port: int, backlog: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (both stacks for ``::``).

    The server must pass the same ``backlog`` to the event loop, which listens again.

    Raises:
        ListenError: in use, not a local address, no permission (the cause kept).
    """
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
            0
        ][0]
        dualstack = family == socket.AF_INET6 and host in ("::", "")
        return socket.create_server(
            (host, port), family=family, backlog=backlog, dualstack_ipv6=dualstack
        )
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise ListenError(f"port {port} on {host} is already in use") from e
        raise ListenError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e


def raise_open_files_limit(wanted: int) -> None:
    """Lift the soft open-files limit towards ``wanted`` (connections plus headroom)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as e:
            log.warning("cannot raise the open-files limit to %d: %s", target, e)
