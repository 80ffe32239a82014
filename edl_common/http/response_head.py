"""HTTP/1.1 response heads and body framing (RFC 9112 §6), written here rather than by h11.

Why not h11's ``send``: it re-validates every header of every answer with regular expressions
and walks its state machine, about 75 µs a response in pure Python: 40 % of what a small
answer costs the server (``bench/bench_adapter.py``). The answers are ours, so the rules that
matter are few and checked here: a value with CR, LF or NUL is refused (no response
splitting), Content-Length is set for a buffered body, a streamed body is chunked for an
HTTP/1.1 client and close-delimited for HTTP/1.0, and 1xx/204/304 answers and answers to
HEAD carry no body. Requests are still parsed and framed by h11
(:mod:`edl_common.http.request_head`).
"""

from __future__ import annotations

import email.utils
import re
import time
from dataclasses import dataclass
from http import HTTPStatus

_FORBIDDEN_RE = re.compile(r"[\r\n\x00]")
_TOKEN_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_NO_BODY = frozenset({204, 304})


class InvalidResponseError(ValueError):
    """An answer that cannot be written as HTTP/1.1 (a bad header name or value, a bad status)."""


@dataclass(frozen=True, slots=True)
class Framing:
    """How the body after a head is delimited."""

    chunked: bool
    """Chunked transfer coding (a streamed body to an HTTP/1.1 client)."""
    body_allowed: bool
    """False: no body bytes at all (HEAD, 1xx, 204, 304)."""
    close: bool
    """The connection closes after the body (asked for, HTTP/1.0, or a close-delimited body)."""


class HttpDate:
    """The ``Date`` header's value, formatted once a second (it has a one-second resolution)."""

    def __init__(self) -> None:
        self._second = -1
        self._value = ""

    def now(self) -> str:
        """The current time as an IMF-fixdate."""
        second = int(time.time())
        if second != self._second:
            self._second = second
            self._value = email.utils.formatdate(second, usegmt=True)
        return self._value


def reason_phrase(status: int) -> str:
    """The standard reason phrase of ``status`` ("" for a code without one)."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def response_head(
    status: int,
    headers: list[tuple[str, str]],
    *,
    date: str,
    method: str | None,
    version: str,
    keep_alive: bool,
    body_length: int | None,
) -> tuple[bytes, Framing]:
    """The bytes of a response head and how its body is framed.

    Args:
        status: the status code (100-999).
        headers: the handler's headers; ``Date``, ``Content-Length``, ``Transfer-Encoding``
            and ``Connection: close`` are added here when needed.
        date: the ``Date`` value, unless ``headers`` has one.
        method: the request's method (None: the head itself was refused).
        version: the request's HTTP version (``HTTP/1.0`` or ``HTTP/1.1``).
        keep_alive: the request allows the connection to stay open.
        body_length: the buffered body's length (None: the body is streamed).

    Raises:
        InvalidResponseError: a header name that is not a token, a value with CR, LF or NUL,
            or a status outside 100-999.
    """
    if not 100 <= status <= 999:
        raise InvalidResponseError(f"status {status} is not a three-digit code")
    lines = [f"HTTP/1.1 {status} {reason_phrase(status)}\r\n"]
    has_date = said_close = False
    close = not keep_alive
    for name, value in headers:
        if not _TOKEN_RE.match(name) or _FORBIDDEN_RE.search(value):
            raise InvalidResponseError(f"header {name!r} cannot be written")
        lower = name.lower()
        if lower in ("content-length", "transfer-encoding"):
            continue  # framing is decided here, from the body
        if lower == "date":
            has_date = True
        elif lower == "connection" and "close" in value.lower():
            close = said_close = True
        lines.append(f"{name}: {value}\r\n")
    if not has_date:
        lines.append(f"Date: {date}\r\n")
    body_allowed = status >= 200 and status not in _NO_BODY and method != "HEAD"
    chunked = False
    if status >= 200 and status not in _NO_BODY:
        if body_length is not None:
            lines.append(f"Content-Length: {body_length}\r\n")
        elif version == "HTTP/1.1":
            chunked = True
            lines.append("Transfer-Encoding: chunked\r\n")
        else:
            close = True  # HTTP/1.0: the body ends when the connection does
    if close and not said_close:
        lines.append("Connection: close\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1"), Framing(chunked, body_allowed, close)


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body (``data`` not empty)."""
    return b"%x\r\n%b\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"
