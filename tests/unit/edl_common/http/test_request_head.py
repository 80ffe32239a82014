"""The shared request-head parser (h11 and the refusals h11 leaves out): strict, verbatim lines."""

from __future__ import annotations

import pytest

from edl_common.http.request_head import (
    HeadLimits,
    HttpError,
    oversize_error,
    parse_head,
    skip_empty_lines,
)

LIMITS = HeadLimits(max_line=200, max_bytes=1000, max_fields=10)
HPA = (
    b"GET /apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/%2A/m?labelSelector=a%3Db HTTP/1.1"
)


def head(*lines: bytes, request_line: bytes = HPA) -> bytes:
    return b"\r\n".join((request_line, *lines))


def test_header_lines_are_kept_one_per_line_verbatim() -> None:
    parsed = parse_head(
        head(
            b"Host: 127.0.0.1",
            b"X-Remote-User:  system:kube-aggregator \t",
            b"X-Remote-Group: devs,system:masters",
            b"x-remote-group: system:authenticated",
            b"X-Remote-Extra-Scopes: a, b",
            b"X-Latin: caf\xe9",
        ),
        LIMITS,
    )
    assert parsed.method == "GET" and parsed.version == "HTTP/1.1"
    assert parsed.target.endswith("?labelSelector=a%3Db")
    assert parsed.headers == (
        ("host", "127.0.0.1"),
        ("x-remote-user", "system:kube-aggregator"),
        ("x-remote-group", "devs,system:masters"),  # one group, comma and all
        ("x-remote-group", "system:authenticated"),
        ("x-remote-extra-scopes", "a, b"),
        ("x-latin", "caf\u00e9"),
    )
    assert parsed.keep_alive and parsed.content_length == 0 and not parsed.chunked


@pytest.mark.parametrize(
    ("data", "code", "words"),
    [
        (head(b"Host: x", b" folded: x"), 400, "obs-fold"),
        (head(b"Host: x", b"Bad Name: x"), 400, "header name"),
        (head(b"Host: x", b"X-A : x"), 400, "header name"),
        (head(b"Host: x", b"no colon"), 400, "header name"),
        (head(b"Host: x", b"X-A: a\x00b"), 400, "control character"),
        (head(b"Host: x", b"X-A: a\nX-B: b"), 400, "control character"),  # bare LF
        (head(), 400, "missing required Host"),
        (head(b"Host: a", b"Host: b"), 400, "too many Host"),
        (head(b"Host: a b"), 400, "malformed Host"),
        (head(b"Host: x", b"Content-Length: 1", b"Content-Length: 2"), 400, "conflicting"),
        (head(b"Host: x", b"Content-Length: -1"), 400, "invalid Content-Length"),
        (head(b"Host: x", b"Content-Length: 99999999999999999999"), 400, "invalid Content"),
        (head(b"Host: x", b"Transfer-Encoding: chunked", b"Content-Length: 3"), 400, "together"),
        (head(b"Host: x", b"Transfer-Encoding: chunked", b"Content-Length: 0"), 400, "together"),
        (head(b"Host: x", b"Content-Length: 0", b"Transfer-Encoding: chunked"), 400, "together"),
        (
            head(b"Host: x", b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked"),
            400,
            "Transfer",
        ),
        (head(b"Host: x", b"X-A: a\x01b"), 400, "control character"),
        (head(b"Host: x", request_line=b"GET http:/x HTTP/1.1"), 400, "authority"),
        (head(b"Host: x", request_line=b"GET ftp://x/ HTTP/1.1"), 400, "an http\\(s\\) URI"),
        (head(b"Host: x", request_line=b"CONNECT x:443 HTTP/1.1"), 400, "origin-form"),
        (head(b"Host: x", b"Transfer-Encoding: gzip"), 400, "Transfer-Encoding"),
        (head(b"Host: x", b"Expect: 200-ok"), 417, "Expect"),
        (head(b"Host: x", request_line=b"GET / HTTP/2.0"), 400, "unsupported HTTP version"),
        (head(b"Host: x", request_line=b"GET / http/1.1"), 400, "HTTP version"),
        (head(b"Host: x", request_line=b"GET  / HTTP/1.1"), 400, "request line"),
        (head(b"Host: x", request_line=b"G(T / HTTP/1.1"), 400, "method"),
        (head(b"Host: x", request_line=b"GET * HTTP/1.1"), 400, "must be a path"),
        (head(b"Host: x", request_line=b"GET /caf\xe9 HTTP/1.1"), 400, "request target"),
        (head(b"Host: x", request_line=b"GET /" + b"a" * 300 + b" HTTP/1.1"), 414, "line"),
        (head(b"Host: x", *[b"X-A: b"] * 11), 431, "header lines"),
        (head(b"Host: x", b"X-A: " + b"b" * 990), 431, "larger than"),
    ],
)
def test_malformed_heads_are_refused_with_a_status_code(data: bytes, code: int, words: str) -> None:
    with pytest.raises(HttpError, match=words) as caught:
        parse_head(data, LIMITS)
    assert caught.value.code == code
    assert caught.value.code < 500  # no client error is a server error


@pytest.mark.parametrize(
    ("version", "connection", "keep_alive"),
    [
        (b"HTTP/1.1", None, True),
        (b"HTTP/1.1", b"close", False),
        (b"HTTP/1.1", b"Upgrade, Close", False),
        (b"HTTP/1.0", None, False),
        (b"HTTP/1.0", b"keep-alive", False),  # h11 closes after every HTTP/1.0 answer
    ],
)
def test_keep_alive_follows_the_version_and_connection(
    version: bytes, connection: bytes | None, keep_alive: bool
) -> None:
    lines = [b"Host: x"] + ([b"Connection: " + connection] if connection else [])
    assert (
        parse_head(head(*lines, request_line=b"GET / " + version), LIMITS).keep_alive is keep_alive
    )


def test_http10_needs_no_host_and_absolute_targets_are_accepted() -> None:
    assert parse_head(b"GET /healthz HTTP/1.0", LIMITS).target == "/healthz"
    parsed = parse_head(head(b"Host: x", request_line=b"GET http://x/apis?a=b HTTP/1.1"), LIMITS)
    assert (parsed.target, parsed.path, parsed.query) == ("http://x/apis?a=b", "/apis", "a=b")


@pytest.mark.parametrize(
    ("target", "path"),
    [
        # the example: origin-form, `://` inside a segment is just part of the path
        (
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/scratch/pods/a://h/apis/"
            "custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/trainer-1/samples_per_second",
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/scratch/pods/a://h/apis/"
            "custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/trainer-1/samples_per_second",
        ),
        ("/a/http://h/b", "/a/http://h/b"),
        ("/https://h/b", "/https://h/b"),
        ("//h/apis", "//h/apis"),  # origin-form: `//` is an empty segment, not an authority
        ("/a?x=http://h/b", "/a"),
        ("/a#http://h/b", "/a"),
        ("http://h", "/"),
        ("HTTPS://h/apis/x", "/apis/x"),
        ("http://h/a://h/b", "/a://h/b"),
    ],
)
def test_the_path_routed_is_the_request_lines_own(target: str, path: str) -> None:
    parsed = parse_head(head(b"Host: x", request_line=f"GET {target} HTTP/1.1".encode()), LIMITS)
    assert parsed.path == path


def test_bodies_are_announced_by_length_or_chunking() -> None:
    assert parse_head(head(b"Host: x", b"Content-Length: 12"), LIMITS).content_length == 12
    assert parse_head(head(b"Host: x", b"Transfer-Encoding: chunked"), LIMITS).chunked


def test_empty_lines_before_a_request_are_skipped() -> None:
    assert skip_empty_lines(b"\r\n\r\n\nGET") == 5
    assert skip_empty_lines(b"GET") == 0
    assert skip_empty_lines(b"\r") == 0  # maybe the start of a CRLF: wait for more


def test_an_incomplete_head_is_refused_as_soon_as_it_is_too_big() -> None:
    assert oversize_error(b"GET /" + b"a" * 150, LIMITS) is None
    line = oversize_error(b"GET /" + b"a" * 250, LIMITS)
    assert line is not None and line.code == 414
    headers = oversize_error(b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 200, LIMITS)
    assert headers is not None and headers.code == 431
