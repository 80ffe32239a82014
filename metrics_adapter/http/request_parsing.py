"""HTTP/1.1 request heads, parsed strictly (RFC 9112), with errors as Kubernetes Status codes.

The adapter's own front end (:mod:`metrics_adapter.http.server`) reads each request head with a
deadline and hands it here. Anything ambiguous is refused with a 4xx rather than guessed at:
whitespace before a colon, obs-fold, control characters, conflicting or malformed
Content-Length, Transfer-Encoding together with Content-Length, a missing or repeated Host on
HTTP/1.1. Header lines are kept in order and verbatim (only the surrounding spaces/tabs are
trimmed, as Go's parser does), one entry per line, so identity headers keep their commas.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN_RE = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_VERSION_RE = re.compile(rb"HTTP/([0-9])\.([0-9])\Z")
# A header value may hold visible ASCII, spaces, tabs and obs-text; no other control bytes.
_BAD_VALUE_RE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
# The request target: visible ASCII only (RFC 3986), no spaces or control bytes.
_TARGET_RE = re.compile(rb"[\x21-\x7e]+\Z")
# Go's httpguts.ValidHostHeader, roughly: host[:port], bracketed IPv6, no spaces or slashes.
_HOST_RE = re.compile(rb"[A-Za-z0-9\-._~!$&'()*+,;=:\[\]%]*\Z")
_OWS = b" \t"


class HttpError(Exception):
    """A request that cannot be served; rendered as a ``metav1.Status`` with ``code``."""

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
    content_length: int
    chunked: bool

    def first(self, name: str) -> str | None:
        """The value of the first ``name`` line (lower-case name), or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


def skip_empty_lines(buf: bytes | bytearray) -> int:
    """How many leading bytes are empty lines (CRLF or LF) to ignore before a request line."""
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


def parse_head(data: bytes, limits: HeadLimits) -> RequestHead:
    """Parse a request head (without its final empty line).

    Raises:
        HttpError: 400 for anything malformed (HTTP/2+ included), 414/431 over the limits,
            417 for an unknown expectation.
    """
    if len(data) > limits.max_bytes:
        raise HttpError(
            431,
            "RequestHeaderFieldsTooLarge",
            f"request headers larger than {limits.max_bytes} bytes",
        )
    lines = data.split(b"\r\n")
    request_line = lines[0]
    if len(request_line) > limits.max_line:
        raise HttpError(
            414, "RequestURITooLong", f"request line longer than {limits.max_line} bytes"
        )
    if len(lines) - 1 > limits.max_fields:
        raise HttpError(
            431, "RequestHeaderFieldsTooLarge", f"more than {limits.max_fields} header lines"
        )
    method, target, version = _request_line(request_line)
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        headers.append(_header(line))
    return _semantics(method, target, version, headers)


def _request_line(line: bytes) -> tuple[str, str, str]:
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
    if not (target.startswith(b"/") or target.startswith((b"http://", b"https://"))):
        raise bad_request("malformed request line: the request target must be a path")
    minor = "1.1" if match.group(2) != b"0" else "1.0"
    return method.decode("ascii"), target.decode("ascii"), f"HTTP/{minor}"


def _header(line: bytes) -> tuple[str, str]:
    if line[:1] in (b" ", b"\t"):
        raise bad_request("malformed header: line folding (obs-fold) is not allowed")
    name, colon, value = line.partition(b":")
    if not colon or not _TOKEN_RE.match(name):
        raise bad_request("malformed header: invalid header name")
    value = value.strip(_OWS)
    if _BAD_VALUE_RE.search(value):
        raise bad_request(f"malformed header {name.decode('ascii')!r}: control character in value")
    return name.decode("ascii").lower(), value.decode("latin-1")


def _semantics(
    method: str, target: str, version: str, headers: list[tuple[str, str]]
) -> RequestHead:
    hosts = [v for k, v in headers if k == "host"]
    if len(hosts) > 1:
        raise bad_request("too many Host headers")
    if version == "HTTP/1.1" and not hosts:
        raise bad_request("missing required Host header")
    if hosts and not _HOST_RE.match(hosts[0].encode("latin-1")):
        raise bad_request("malformed Host header")
    lengths = {v for k, v in headers if k == "content-length"}
    encodings = [v for k, v in headers if k == "transfer-encoding"]
    content_length = 0
    if len(lengths) > 1:
        raise bad_request("conflicting Content-Length headers")
    if lengths:
        raw = lengths.pop()
        if not raw.isdigit() or not raw.isascii() or len(raw) > 18:
            raise bad_request(f"invalid Content-Length {raw[:40]!r}")
        content_length = int(raw)
    chunked = False
    if encodings:
        if lengths or content_length:
            raise bad_request("Transfer-Encoding together with Content-Length")
        codings = [c.strip().lower() for v in encodings for c in v.split(",")]
        if version == "HTTP/1.0" or codings != ["chunked"]:
            raise bad_request("unsupported Transfer-Encoding (only 'chunked' on HTTP/1.1)")
        chunked = True
    tokens = {t.strip().lower() for k, v in headers if k == "connection" for t in v.split(",")}
    if version == "HTTP/1.1":
        keep_alive = "close" not in tokens
    else:
        keep_alive = "keep-alive" in tokens and "close" not in tokens
    expect = [v.lower() for k, v in headers if k == "expect"]
    if expect and expect != ["100-continue"]:
        raise HttpError(417, "ExpectationFailed", "unsupported Expect header")
    return RequestHead(method, target, version, tuple(headers), keep_alive, content_length, chunked)
