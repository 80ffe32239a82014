"""HTTP/1.1 request heads: h11 parses, and what h11 lets through is refused here (RFC 9112).

h11 reads the request line and the header block and validates names, values, Host and
Content-Length. It is lenient where a server behind a proxy must not be: it unfolds obs-fold,
takes a bare LF as a line end, lets control bytes through in values, and ignores a
Content-Length next to ``Transfer-Encoding: chunked`` (the RFC's rule for a *recipient*, and
the classic request-smuggling gap: a front proxy may frame the message by the length). So
those are refused before or after h11, each with a 4xx and a sentence that says why; no
client error is answered with a 5xx. Header lines stay in order, one entry per line, so
identity headers keep their commas.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import h11

from edl_common.http.target import Target, TargetError, split_target

_TOKEN_RE = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_VERSION_RE = re.compile(rb"HTTP/([0-9])\.([0-9])\Z")
# A header value may hold visible ASCII, spaces, tabs and obs-text; no other control bytes.
_BAD_VALUE_RE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
# The request target: visible ASCII only (RFC 3986), no spaces or control bytes.
_TARGET_RE = re.compile(rb"[\x21-\x7e]+\Z")
# Go's httpguts.ValidHostHeader, roughly: host[:port], bracketed IPv6, no spaces or slashes.
_HOST_RE = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:\[\]%]*\Z")


class HttpError(Exception):
    """A request that cannot be served, with the status ``code`` and reason to answer it with."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


def bad_request(message: str) -> HttpError:
    """A 400 BadRequest."""
    return HttpError(400, "BadRequest", message)


@dataclass(frozen=True, slots=True)
class HeadLimits:
    """Sizes a request head may have."""

    max_line: int = 16384
    """Longest request line (method, target, version); longer is 414."""
    max_bytes: int = 65536
    """Longest head (request line and every header line); longer is 431."""
    max_fields: int = 128
    """Most header lines; more is 431."""


@dataclass(frozen=True, slots=True)
class RequestHead:
    """One parsed request line and its header lines."""

    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]
    """``(lower-case name, value)`` per header line, in order, values verbatim (latin-1)."""
    keep_alive: bool
    """What h11 will do: HTTP/1.1 without ``Connection: close`` (HTTP/1.0 always closes)."""
    content_length: int
    chunked: bool
    path: str
    """The target's path, still percent-encoded (origin-form, or absolute-form's path)."""
    query: str

    def first(self, name: str) -> str | None:
        """The value of the first ``name`` line (lower-case name), or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


def skip_empty_lines(buf: bytes | bytearray) -> int:
    """How many leading bytes are empty lines (CRLF or LF) to ignore before a request line.

    RFC 9112 §2.2 asks a server to ignore them; h11 refuses them, so they never reach it.
    """
    i = 0
    n = len(buf)
    while i < n:
        if buf[i] == 0x0A:
            i += 1
        elif buf[i] == 0x0D and i + 1 < n and buf[i + 1] == 0x0A:
            i += 2
        else:
            break
    return i


def oversize_error(buf: bytes | bytearray, limits: HeadLimits) -> HttpError | None:
    """The error for an incomplete head that is already too big, or None while it may fit."""
    line_end = buf.find(b"\r\n", 0, limits.max_line + 2)
    if line_end < 0 and len(buf) > limits.max_line:
        return HttpError(
            414, "RequestURITooLong", f"request line longer than {limits.max_line} bytes"
        )
    if len(buf) > limits.max_bytes:
        return HttpError(
            431,
            "RequestHeaderFieldsTooLarge",
            f"request headers larger than {limits.max_bytes} bytes",
        )
    return None


def new_connection(limits: HeadLimits) -> h11.Connection:
    """An h11 server connection for one request (its buffer bound a little above the head)."""
    return h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_bytes + 4)


def parse_head(data: bytes, limits: HeadLimits) -> RequestHead:
    """Parse a request head (without its final empty line).

    Raises:
        HttpError: 400 for anything malformed (HTTP/2+ included), 414/431 over the limits,
            417 for an unknown expectation.
    """
    return start_request(data, b"", limits)[0]


def start_request(
    data: bytes, rest: bytes, limits: HeadLimits
) -> tuple[RequestHead, h11.Connection]:
    """Parse a head (without its final empty line) and hand h11 what follows it.

    Returns the head and the h11 connection that frames this request's body (from ``rest``
    and later reads) and its response.

    Raises:
        HttpError: as :func:`parse_head`.
    """
    lines = _checked_lines(data, limits)
    target = _request_line(lines[0])
    conn = new_connection(limits)
    conn.receive_data(data + b"\r\n\r\n" + rest)
    try:
        event = conn.next_event()
    except h11.RemoteProtocolError as e:
        raise _from_h11(e) from e
    if not isinstance(event, h11.Request):  # cannot happen: the head is complete
        raise bad_request("malformed request head")
    return _semantics(event, target), conn


def _checked_lines(data: bytes, limits: HeadLimits) -> list[bytes]:
    """The head's lines, refused for what h11 would accept: bare CR/LF, obs-fold, sizes."""
    if len(data) > limits.max_bytes:
        raise HttpError(
            431,
            "RequestHeaderFieldsTooLarge",
            f"request headers larger than {limits.max_bytes} bytes",
        )
    lines = data.split(b"\r\n")
    if len(lines[0]) > limits.max_line:
        raise HttpError(
            414, "RequestURITooLong", f"request line longer than {limits.max_line} bytes"
        )
    if len(lines) - 1 > limits.max_fields:
        raise HttpError(
            431, "RequestHeaderFieldsTooLarge", f"more than {limits.max_fields} header lines"
        )
    for line in lines[1:]:
        if line[:1] in (b" ", b"\t"):
            raise bad_request("malformed header: line folding (obs-fold) is not allowed")
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN_RE.match(name):
            raise bad_request("malformed header: invalid header name")
        if _BAD_VALUE_RE.search(value):
            raise bad_request(
                f"malformed header {name.decode('ascii')!r}: control character in value"
            )
    return lines


def _request_line(line: bytes) -> Target:
    """Check the request line's form with messages that say which part is wrong."""
    parts = line.split(b" ")
    if len(parts) != 3:
        raise bad_request("malformed request line: expected 'METHOD TARGET HTTP/1.1'")
    method, target, version = parts
    if not _TOKEN_RE.match(method):
        raise bad_request("malformed request line: invalid method")
    match = _VERSION_RE.match(version)
    if match is None:
        raise bad_request("malformed request line: invalid HTTP version")
    if match.group(1) != b"1":
        # 400, not Go's 505: no error of the client's is answered with a 5xx here.
        raise bad_request("unsupported HTTP version: only HTTP/1.0 and HTTP/1.1 are served")
    if not _TARGET_RE.match(target):
        raise bad_request("malformed request line: invalid request target")
    try:
        return split_target(target.decode("ascii"))
    except TargetError as e:
        raise bad_request(f"malformed request line: {e}") from e


def _from_h11(error: h11.RemoteProtocolError) -> HttpError:
    text = str(error)
    if text.startswith("illegal header line"):
        return bad_request("malformed header: invalid header name or value")
    if "Missing mandatory Host" in text:
        return bad_request("missing required Host header")
    if "multiple Host" in text:
        return bad_request("too many Host headers")
    if error.error_status_hint == 501 or "Transfer-Encoding" in text:
        return bad_request(f"unsupported Transfer-Encoding: {text}")
    if text.startswith("bad Content-Length"):
        return bad_request("invalid Content-Length (digits only)")
    if error.error_status_hint == 431:
        return HttpError(431, "RequestHeaderFieldsTooLarge", "request headers too large")
    return bad_request(text)


def _semantics(event: h11.Request, target: Target) -> RequestHead:
    version = f"HTTP/{event.http_version.decode('ascii')}"
    headers = tuple(
        (name.decode("ascii").lower(), value.decode("latin-1"))
        for name, value in event.headers.raw_items()
    )
    hosts = [v for k, v in headers if k == "host"]
    if hosts and not _HOST_RE.match(hosts[0]):
        raise bad_request("malformed Host header")
    lengths = [v for k, v in headers if k == "content-length"]
    if lengths and len(lengths[0]) > 18:
        raise bad_request(f"invalid Content-Length {lengths[0][:40]!r}")
    chunked = any(k == "transfer-encoding" for k, _ in headers)
    if chunked and lengths:  # checked on the lines as sent: `Content-Length: 0` included
        raise bad_request("Transfer-Encoding together with Content-Length")
    if chunked and version == "HTTP/1.0":
        raise bad_request("unsupported Transfer-Encoding (only 'chunked' on HTTP/1.1)")
    tokens = {t.strip().lower() for k, v in headers if k == "connection" for t in v.split(",")}
    keep_alive = version == "HTTP/1.1" and "close" not in tokens
    expect = [v.lower() for k, v in headers if k == "expect"]
    if expect and expect != ["100-continue"]:
        raise HttpError(417, "ExpectationFailed", "unsupported Expect header")
    return RequestHead(
        method=event.method.decode("ascii"),
        target=event.target.decode("ascii"),
        version=version,
        headers=headers,
        keep_alive=keep_alive,
        content_length=int(lengths[0]) if lengths else 0,
        chunked=chunked,
        path=target.path,
        query=target.query,
    )
