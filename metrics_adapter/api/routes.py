"""URL router: a raw request path (still percent-encoded) to a :class:`Route`.

Segments are split on ``/`` before decoding, so ``%2A`` is ``*`` but ``%2F`` never splits a
segment (it makes an invalid name instead). Every malformed path raises
:class:`InvalidPathError` (400) or :class:`NotFoundError` (404), never anything else.
"""

from __future__ import annotations

import enum
import re
import threading
from dataclasses import dataclass
from urllib.parse import unquote

import cachetools

from edl_common.http.target import TargetError, split_target
from metrics_adapter.bounded_cache import estimate_text
from metrics_adapter.errors import InvalidPathError, NotFoundError
from metrics_adapter.kube.names import DNS1123_LABEL, DNS1123_SUBDOMAIN
from metrics_adapter.scraping.catalogue import METRIC_NAME

CUSTOM_GROUP = "custom.metrics.k8s.io"
EXTERNAL_GROUP = "external.metrics.k8s.io"
GROUP_VERSIONS = {CUSTOM_GROUP: ("v1beta2", "v1beta1"), EXTERNAL_GROUP: ("v1beta1",)}

_RESOURCE = re.compile(r"^[a-z][a-z0-9-]*(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_HEALTH = ("healthz", "livez", "readyz")


class RouteKind(enum.Enum):
    """What a path asks for."""

    ROOT = "root"
    HEALTH = "health"
    SELF_METRICS = "metrics"
    OPENAPI = "openapi"
    VERSION = "version"
    API_GROUP_LIST = "apis"
    API_GROUP = "group"
    API_RESOURCE_LIST = "resources"
    CUSTOM_OBJECTS = "custom_objects"
    CUSTOM_NAMESPACE = "custom_namespace"
    CUSTOM_ROOT = "custom_root"
    EXTERNAL = "external"
    DEBUG = "debug"


@dataclass(frozen=True)
class Route:
    """A parsed path."""

    kind: RouteKind
    path: str
    group: str = ""
    version: str = ""
    namespace: str = ""
    resource: str = ""
    name: str = ""
    metric: str = ""

    @property
    def label(self) -> str:
        """A low-cardinality name for the adapter's own metrics."""
        if self.kind is RouteKind.CUSTOM_OBJECTS and self.resource == "pods":
            return f"{self.version}/pods"
        if self.kind is RouteKind.CUSTOM_OBJECTS:
            return f"{self.version}/objects"
        if self.kind in (RouteKind.CUSTOM_NAMESPACE, RouteKind.CUSTOM_ROOT):
            return f"{self.version}/{self.kind.value}"
        return str(self.kind.value)


def split_raw_path(raw_uri: str) -> str:
    """The path part of a raw request URI (``RAW_URI``), without query or scheme/host.

    Absolute-form only when the target starts with a scheme (RFC 9112 §3.2.2): an
    origin-form path that contains ``://`` is routed as it is, the path kube-apiserver
    authorised.

    Raises:
        InvalidPathError: neither origin-form nor an http(s) absolute-form target.
    """
    try:
        return split_target(raw_uri).path
    except TargetError as e:
        raise InvalidPathError(str(e)) from e


def _decode(segment: str) -> str:
    try:
        return unquote(segment, errors="strict")
    except UnicodeDecodeError as e:
        raise InvalidPathError(f"invalid percent-encoding in path segment {segment!r}") from e


def _check(value: str, pattern: re.Pattern[str], what: str, limit: int) -> str:
    if len(value) > limit or not pattern.match(value):
        raise InvalidPathError(f"invalid {what} {value!r} in request path")
    return value


def _name(value: str) -> str:
    return value if value == "*" else _check(value, DNS1123_SUBDOMAIN, "object name", 253)


def _metric(value: str) -> str:
    return _check(value, METRIC_NAME, "metric name", 253)


PARSED_PATHS_MAX_BYTES = 4 << 20
"""The parsed-path cache's budget (paths are client input)."""


def route_bytes(route: Route) -> int:
    """A route's estimated bytes with the raw path it was parsed from (its key).

    The raw path is percent-encoded: up to three times the decoded one.
    """
    fields = (route.group, route.version, route.namespace, route.resource, route.name)
    return estimate_text(route.path) * 4 + estimate_text(*fields, route.metric) + 256


@cachetools.cached(
    cachetools.LRUCache(maxsize=PARSED_PATHS_MAX_BYTES, getsizeof=route_bytes),
    lock=threading.Lock(),
)
def parse_path(raw_path: str) -> Route:
    """Parse a raw (percent-encoded) path into a Route (cached: the HPA repeats its paths).

    Raises:
        InvalidPathError: a segment is malformed (bad encoding, bad name, empty segment).
        NotFoundError: the path has no meaning here.
    """
    if not raw_path.startswith("/"):
        raise InvalidPathError(f"request path {raw_path!r} must start with '/'")
    body = raw_path[1:]
    if body.endswith("/"):
        body = body[:-1]
    if body == "":
        return Route(RouteKind.ROOT, "/")
    raw_segments = body.split("/")
    segs = [_decode(s) for s in raw_segments]
    path = "/" + "/".join(segs)
    if any(s == "" for s in segs):
        raise InvalidPathError(f"empty segment in request path {path!r}")
    if (len(segs) == 1 and segs[0] in _HEALTH) or (len(segs) == 2 and segs[0] in _HEALTH):
        return Route(RouteKind.HEALTH, path, name=segs[0])
    if segs == ["metrics"]:
        return Route(RouteKind.SELF_METRICS, path)
    if segs == ["version"]:
        return Route(RouteKind.VERSION, path)
    if segs[0] == "openapi":
        return Route(RouteKind.OPENAPI, path)
    if segs[0] == "debug" and len(segs) == 2:
        return Route(RouteKind.DEBUG, path, name=segs[1])
    if segs[0] != "apis":
        raise NotFoundError(f"the server could not find the requested resource {path!r}")
    if len(segs) == 1:
        return Route(RouteKind.API_GROUP_LIST, path)
    group = segs[1]
    if group not in GROUP_VERSIONS:
        raise NotFoundError(f"the server could not find the requested resource (group {group!r})")
    if len(segs) == 2:
        return Route(RouteKind.API_GROUP, path, group=group)
    version = segs[2]
    if version not in GROUP_VERSIONS[group]:
        raise NotFoundError(
            f"the server could not find the requested resource (version {group}/{version})"
        )
    rest = segs[3:]
    base = Route(RouteKind.API_RESOURCE_LIST, path, group=group, version=version)
    if not rest:
        return base
    if group == EXTERNAL_GROUP:
        return _external(base, rest)
    return _custom(base, rest)


def _external(base: Route, rest: list[str]) -> Route:
    if len(rest) == 3 and rest[0] == "namespaces":
        return Route(
            RouteKind.EXTERNAL,
            base.path,
            base.group,
            base.version,
            namespace=_check(rest[1], DNS1123_LABEL, "namespace", 63),
            metric=_metric(rest[2]),
        )
    raise NotFoundError(
        f"the server could not find the requested resource {base.path!r} "
        "(external metrics are read at namespaces/{namespace}/{metric})"
    )


def _custom(base: Route, rest: list[str]) -> Route:
    if rest[0] == "namespaces" and len(rest) in (4, 5):
        namespace = _check(rest[1], DNS1123_LABEL, "namespace", 63)
        if len(rest) == 4:
            if rest[2] != "metrics":
                raise NotFoundError(
                    f"the server could not find the requested resource {base.path!r} "
                    "(namespace metrics are read at namespaces/{namespace}/metrics/{metric})"
                )
            return Route(
                RouteKind.CUSTOM_NAMESPACE,
                base.path,
                base.group,
                base.version,
                namespace=namespace,
                resource="namespaces",
                name=namespace,
                metric=_metric(rest[3]),
            )
        return Route(
            RouteKind.CUSTOM_OBJECTS,
            base.path,
            base.group,
            base.version,
            namespace=namespace,
            resource=_check(rest[2], _RESOURCE, "resource", 253),
            name=_name(rest[3]),
            metric=_metric(rest[4]),
        )
    if len(rest) == 3:
        return Route(
            RouteKind.CUSTOM_ROOT,
            base.path,
            base.group,
            base.version,
            resource=_check(rest[0], _RESOURCE, "resource", 253),
            name=_name(rest[1]),
            metric=_metric(rest[2]),
        )
    raise NotFoundError(
        f"the server could not find the requested resource {base.path!r} (expected "
        "{resource}/{name}/{metric}, namespaces/{ns}/{resource}/{name}/{metric} or "
        "namespaces/{ns}/metrics/{metric})"
    )
