"""The response heads the front end writes itself: framing a client can parse, no splitting."""

from __future__ import annotations

import h11
import pytest

from edl_common.http.response_head import (
    LAST_CHUNK,
    Framing,
    HttpDate,
    InvalidResponseError,
    chunk,
    response_head,
)

DATE = "Wed, 02 Dec 2026 01:00:00 GMT"


def head(
    status: int = 200,
    headers: list[tuple[str, str]] | None = None,
    method: str | None = "GET",
    version: str = "HTTP/1.1",
    keep_alive: bool = True,
    body_length: int | None = 2,
) -> tuple[bytes, Framing]:
    return response_head(
        status,
        headers if headers is not None else [("Content-Type", "text/plain")],
        date=DATE,
        method=method,
        version=version,
        keep_alive=keep_alive,
        body_length=body_length,
    )


def client_reads(request: bytes, answer: bytes) -> list[object]:
    """What an h11 client makes of ``answer`` to ``request``: its events, in order."""
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method=request.split(b" ")[0], target="/", headers=[("Host", "x")]))
    client.send(h11.EndOfMessage())
    client.receive_data(answer)
    events: list[object] = []
    for _ in range(100):
        event = client.next_event()
        if event is h11.NEED_DATA:
            client.receive_data(b"")  # the server closed
            continue
        events.append(event)
        if isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            break
    return events


def test_a_buffered_body_gets_its_length_and_a_date_and_a_client_reads_it() -> None:
    data, framing = head()
    assert data.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"Content-Length: 2\r\n" in data and f"Date: {DATE}\r\n".encode() in data
    assert not framing.chunked and framing.body_allowed and not framing.close
    events = client_reads(b"GET", data + b"ok")
    assert isinstance(events[0], h11.Response) and events[0].status_code == 200
    assert isinstance(events[1], h11.Data) and events[1].data == b"ok"


def test_a_streamed_body_is_chunked_for_http11_and_ends_with_the_last_chunk() -> None:
    data, framing = head(body_length=None)
    assert b"Transfer-Encoding: chunked\r\n" in data and b"Content-Length" not in data
    assert framing.chunked and not framing.close
    events = client_reads(b"GET", data + chunk(b"he") + chunk(b"llo") + LAST_CHUNK)
    body = b"".join(e.data for e in events if isinstance(e, h11.Data))
    assert body == b"hello" and isinstance(events[-1], h11.EndOfMessage)


def test_a_streamed_body_to_http10_is_delimited_by_the_close() -> None:
    data, framing = head(version="HTTP/1.0", keep_alive=False, body_length=None)
    assert b"Transfer-Encoding" not in data and b"Connection: close\r\n" in data
    assert not framing.chunked and framing.close


def test_head_and_bodiless_statuses_carry_no_body() -> None:
    _, framing = head(method="HEAD")
    assert not framing.body_allowed
    for status in (204, 304):
        data, framing = head(status=status, body_length=0)
        assert b"Content-Length" not in data and not framing.body_allowed


def test_close_is_said_when_asked_by_the_request_or_the_handler() -> None:
    assert b"Connection: close" in head(keep_alive=False)[0]
    data, framing = head(headers=[("Connection", "close")])
    assert data.count(b"Connection: close") == 1 and framing.close


def test_the_handler_cannot_split_the_response_or_set_the_framing() -> None:
    for bad in ([("X-A", "1\r\nSet-Cookie: x")], [("X-A", "a\nb")], [("Bad Name", "v")]):
        with pytest.raises(InvalidResponseError):
            head(headers=bad)
    with pytest.raises(InvalidResponseError):
        head(status=42)
    data, _ = head(headers=[("Content-Length", "999"), ("Transfer-Encoding", "gzip")])
    assert b"999" not in data and b"gzip" not in data and b"Content-Length: 2\r\n" in data


def test_a_date_of_the_handler_is_kept_and_the_clock_is_formatted_per_second() -> None:
    data, _ = head(headers=[("Date", "Thu, 01 Jan 1970 00:00:00 GMT")])
    assert data.count(b"Date:") == 1 and b"1970" in data
    clock = HttpDate()
    assert clock.now().endswith(" GMT") and clock.now() is clock.now()
