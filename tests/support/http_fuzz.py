"""A seeded generator of malformed HTTP/1.1 requests and a checker of the adapter's answers.

Each case is raw bytes sent on a fresh connection (plain TCP or TLS): mutations of the HPA's
own request line, target, query, headers and body, including what gunicorn's and Go's
parsers refuse (bad tokens, obs-fold, control bytes, conflicting lengths, oversize lines and
heads, HTTP/2 versions, truncated heads). The checker reads one answer and says what is wrong
with it: a 5xx, a non-Status error body, a Status whose code differs from the HTTP status, or
no answer at all.
"""

from __future__ import annotations

import json
import random
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass

HPA_PATH = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/%2A/samples_per_second"
HPA_QUERY = "labelSelector=app%3Dtrainer"
_METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT"]
_PATHS = [
    HPA_PATH,
    "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/trainer-0/step_seconds",
    "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/deployments.apps/trainer/samples_per_second",
    "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/metrics/gpu_utilization",
    "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/busy_accelerators",
    "/apis/custom.metrics.k8s.io/v1beta2",
    "/apis",
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi/v2",
    "/version",
    "/",
]
_SELECTORS = [
    "app=trainer",
    "app in (",
    "app notin (a,b)",
    "!app",
    "a==b,c!=d",
    "a>1",
    "((((",
    "app=" + "x" * 70,
    "app=tr%C3%A4iner",
    "=",
    ",,,",
    "app=\u00e9",
]
_PIECES = [
    "%2F",
    "%00",
    "%zz",
    "%",
    "%2",
    "..",
    "//",
    "%2E%2E",
    "%C3%28",
    "%FF",
    "*",
    "%2A",
    ";",
    "@",
    "~",
    "%20",
    "\\",
]


@dataclass(frozen=True)
class Case:
    """One malformed request."""

    kind: str
    data: bytes
    head_request: bool
    """Sent as HEAD: an answer has no body to check."""


def _token(rng: random.Random, n: int) -> str:
    return "".join(
        rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789-_.~!") for _ in range(n)
    )


def _valid(rng: random.Random) -> tuple[str, str, str, list[tuple[str, str]]]:
    path = rng.choice(_PATHS)
    query = HPA_QUERY if rng.random() < 0.7 else ""
    target = path + ("?" + query if query else "")
    headers = [
        ("Host", "127.0.0.1"),
        ("User-Agent", "kube-controller-manager/v1.35.4 fuzz"),
        ("Accept", "application/vnd.kubernetes.protobuf, */*"),
        ("X-Remote-User", "system:serviceaccount:kube-system:horizontal-pod-autoscaler"),
        ("X-Remote-Group", "system:authenticated"),
    ]
    return "GET", target, "HTTP/1.1", headers


def _render(method: str, target: str, version: str, headers: list[tuple[str, str]]) -> bytes:
    head = f"{method} {target} {version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
    return (head + "\r\n").encode("latin-1", "replace")


def _mutate_target(rng: random.Random, target: str) -> str:
    path, _, query = target.partition("?")
    choice = rng.randrange(9)
    if choice == 0:
        i = rng.randrange(len(path) + 1)
        path = path[:i] + rng.choice(_PIECES) + path[i:]
    elif choice == 1:
        parts = path.split("/")
        parts[rng.randrange(len(parts))] = _token(rng, rng.randrange(0, 300))
        path = "/".join(parts)
    elif choice == 2:
        query = "labelSelector=" + rng.choice(_SELECTORS)
    elif choice == 3:
        query = (
            "metricLabelSelector="
            + rng.choice(_SELECTORS)
            + "&labelSelector="
            + rng.choice(_SELECTORS)
        )
    elif choice == 4:
        query = "&".join(f"{_token(rng, 5)}={_token(rng, 5)}" for _ in range(rng.randrange(1, 30)))
    elif choice == 5:
        return "http://127.0.0.1" + target
    elif choice == 6:
        return rng.choice(["*", "", "apis", "//", "?", "#", "/" + "a" * 20000])
    elif choice == 7:
        path = path + "/" + "/".join(_token(rng, 3) for _ in range(rng.randrange(1, 8)))
    else:
        query = query + "#" + _token(rng, 8)
    return path + ("?" + query if query else "")


def _mutate_headers(rng: random.Random, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    headers = list(headers)
    choice = rng.randrange(16)
    if choice == 0:
        headers.append(("Bad Name", "x"))
    elif choice == 1:
        headers.append((rng.choice(["X-A\x00", "(x)", "x@y", "", "X:Y"]), "v"))
    elif choice == 2:
        headers.append(
            ("X-Remote-Group", rng.choice(["a,b", "", " ", "devs,system:masters", "\u00e9"]))
        )
    elif choice == 3:
        headers.append(("X-Remote-User", rng.choice(["", "a,b", "\t", "\u00ff" * 3])))
    elif choice == 4:
        headers.append(
            (
                "Content-Length",
                rng.choice(["-1", "abc", "1e3", " 5", "99999999999999999999", "+4", "0x10"]),
            )
        )
    elif choice == 5:
        headers += [("Content-Length", "1"), ("Content-Length", "2")]
    elif choice == 6:
        headers.append(
            (
                "Transfer-Encoding",
                rng.choice(["chunked", "gzip", "chunked, gzip", "identity", "xchunked"]),
            )
        )
        if rng.random() < 0.5:
            headers.append(("Content-Length", "3"))
    elif choice == 7:
        headers = [(k, v) for k, v in headers if k != "Host"]
    elif choice == 8:
        headers.append(("Host", "other"))
    elif choice == 9:
        headers.append(("Host", rng.choice(["a b", "a/b", "\u00e9", "[::1", "x" * 300])))
        headers = [h for h in headers if not (h[0] == "Host" and h[1] == "127.0.0.1")]
    elif choice == 10:
        headers.append(("X-Big", "y" * rng.choice([100, 20000, 70000])))
    elif choice == 11:
        headers += [(f"X-H{i}", "v") for i in range(rng.choice([50, 129, 300]))]
    elif choice == 12:
        headers.append(("Expect", rng.choice(["100-continue", "200-ok", "x"])))
    elif choice == 13:
        headers.append(
            (
                "Authorization",
                rng.choice(["Bearer", "Bearer ", "Basic abc", "Bearer \u00e9", "bearer x y"]),
            )
        )
    elif choice == 14:
        headers.append(("Connection", rng.choice(["close", "keep-alive", "upgrade", "x, close"])))
    else:
        headers.append(("Accept", rng.choice(["", "*/*;q=x", "application/json;" * 50])))
    return headers


def _raw_damage(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    choice = rng.randrange(8)
    if choice == 0:  # flip bytes
        buf = bytearray(data)
        for _ in range(rng.randrange(1, 6)):
            i = rng.randrange(len(buf) - 4)
            buf[i] = rng.randrange(256)
        return "flip", bytes(buf)
    if choice == 1:  # obs-fold
        return "fold", data.replace(b"\r\nAccept:", b"\r\n Accept:", 1)
    if choice == 2:  # bare LF / bare CR inside the head
        return "bare-eol", data.replace(
            b"\r\n", rng.choice([b"\n", b"\r", b"\r\r\n"]), rng.randrange(1, 4)
        )
    if choice == 3:  # control bytes in a value
        return "ctl", data.replace(b"fuzz", b"f\x01\x7fz", 1)
    if choice == 4:  # leading empty lines (legal) or junk before the request line
        return "leading", rng.choice([b"\r\n" * rng.randrange(1, 50), b"\x16\x03\x01", b" "]) + data
    if choice == 5:  # a pipelined second request, maybe broken
        return "pipeline", data + rng.choice([data, b"GARBAGE\r\n\r\n", data[: len(data) // 2]])
    if choice == 6:  # a body (announced or not)
        body = b"x" * rng.choice([0, 5, 70000])
        return "body", data[:-2] + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    return "double-space", data.replace(b" ", b"  ", 1)


def make_case(rng: random.Random) -> Case:
    """One seeded malformed request."""
    method, target, version, headers = _valid(rng)
    kind = rng.choice(["method", "target", "version", "headers", "raw", "mixed"])
    if kind in ("method", "mixed"):
        method = rng.choice(
            [*_METHODS, "get", "", "G ET", "GET\x00", _token(rng, rng.randrange(1, 40)), "\u00c9T"]
        )
    if kind in ("target", "mixed"):
        target = _mutate_target(rng, target)
    if kind in ("version", "mixed"):
        version = rng.choice(
            [
                "HTTP/1.0",
                "HTTP/2.0",
                "HTTP/3",
                "HTTP/1.10",
                "http/1.1",
                "HTTP/1",
                "",
                "HTTP/9.9",
                "HTTP/1.1 x",
            ]
        )
    if kind in ("headers", "mixed"):
        for _ in range(rng.randrange(1, 4)):
            headers = _mutate_headers(rng, headers)
    data = _render(method, target, version, headers)
    if kind == "raw" or rng.random() < 0.15:
        damage, data = _raw_damage(rng, data)
        kind = f"{kind}+{damage}"
    if rng.random() < 0.05:  # truncated: the client stops inside the head
        data = data[: rng.randrange(1, max(2, len(data) - 4))]
        kind += "+truncated"
    return Case(kind, data, data.lstrip(b"\r\n").startswith(b"HEAD "))


def cases(seed: int, count: int) -> list[Case]:
    """``count`` cases from ``seed`` (same seed, same cases)."""
    rng = random.Random(seed)
    return [make_case(rng) for _ in range(count)]


@dataclass(frozen=True)
class Answer:
    """What came back for one case."""

    status: int | None
    body: bytes
    raw: bytes


def _read_answer(sock: socket.socket, head_request: bool) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    if head_request:
        length = 0
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return head + b"\r\n\r\n" + rest[:length]


def send(case: Case, connect: Callable[[], socket.socket], half_close: bool) -> Answer:
    """Send one case on a fresh connection and read one answer."""
    sock = connect()
    try:
        try:
            sock.sendall(case.data)
            if half_close and "truncated" in case.kind:
                sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass
        try:
            raw = _read_answer(sock, case.head_request)
        except (ConnectionResetError, ssl.SSLError, TimeoutError):
            raw = b""
    finally:
        sock.close()
    if not raw.startswith(b"HTTP/1.1 "):
        return Answer(None, b"", raw)
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head[9:12])
    if case.head_request:
        body = b""
    return Answer(status, body, raw)


def problem(case: Case, answer: Answer) -> str | None:
    """What is wrong with ``answer`` (None: nothing)."""
    if answer.status is None:
        if case.data.strip(b"\r\n") == b"":
            return None
        return f"no HTTP answer: {answer.raw[:120]!r}"
    if answer.status >= 500:
        return f"{answer.status}: {answer.body[:300]!r}"
    if answer.status < 400 or not answer.body:
        return None
    try:
        status = json.loads(answer.body)
    except ValueError:
        return f"{answer.status} with a body that is not JSON: {answer.body[:200]!r}"
    if not isinstance(status, dict) or status.get("kind") != "Status":
        return f"{answer.status} with a body that is not a Status: {answer.body[:200]!r}"
    if status.get("code") != answer.status or status.get("apiVersion") != "v1":
        return f"{answer.status} with a Status of code {status.get('code')!r}"
    if status.get("status") != "Failure" or not isinstance(status.get("message"), str):
        return f"{answer.status} with an incomplete Status: {status!r}"
    return None
