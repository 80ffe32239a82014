"""The asyncio internals edl_common.http.channel relies on are still there.

channel.py subclasses asyncio's private ``SSLProtocol`` (to size its buffers) and cuts a
selector transport's reference to itself through a private attribute (so a closed connection
is freed by reference counting). Both are CPython 3.11-3.13 details: this test fails, naming
the attribute, on the first Python whose asyncio moved them, before a flood finds out. They
retire when asyncio lets a server choose its TLS buffer sizes (``loop.start_tls`` takes none)
and frees aborted transports without the cyclic collector.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from asyncio import selector_events, sslproto

import pytest

from edl_common.http import channel

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "name", ["max_size", "_set_read_buffer_limits", "_set_write_buffer_limits"]
)
def test_the_ssl_protocol_keeps_what_the_channel_sizes(name: str) -> None:
    assert hasattr(sslproto.SSLProtocol, name), f"asyncio.sslproto.SSLProtocol.{name} is gone"


def test_a_server_tls_protocol_has_the_read_buffer_it_releases() -> None:
    loop = asyncio.new_event_loop()
    try:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls = channel._ServerTls(loop, asyncio.Protocol(), context, None, server_side=True)
        assert len(tls._ssl_buffer) == channel.TLS_READ_SIZE
        assert isinstance(tls._ssl_buffer_view, memoryview)
        tls.release()
        assert len(tls._ssl_buffer) == 0
    finally:
        loop.close()


def test_a_selector_transport_holds_its_read_callback_where_the_channel_cuts_it() -> None:
    loop = asyncio.new_event_loop()
    a, b = socket.socketpair()
    try:
        transport = selector_events._SelectorSocketTransport(loop, a, asyncio.Protocol())  # type: ignore[attr-defined]
        assert hasattr(transport, "_read_ready_cb"), "the transport's read callback moved"
        transport.abort()
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        b.close()
        loop.close()
