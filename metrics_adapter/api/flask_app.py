"""The Flask app factory: the app routes and renders; every error is a metav1.Status.

Authentication and authorisation happen before the app, in the filters
(:mod:`metrics_adapter.api.filters`, installed as the app's WSGI middleware): by the time the
app runs, the caller is known and allowed, and the app never waits on the network, so the
front end runs it once, on its event loop.

Paths are routed by :func:`metrics_adapter.api.routes.parse_path` over the raw (still
percent-encoded) path, not by Flask's URL map, which sees the decoded one: ``%2A`` must work
as ``*`` and ``%2F`` must not smuggle a segment (kube-apiserver splits before decoding too).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from flask import Flask, Response, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from metrics_adapter.api import wire_shapes as wire
from metrics_adapter.api.filters import (
    ROUTE_ENVIRON_KEY,
    STARTED_ENVIRON_KEY,
    RequestFilters,
    raw_path,
)
from metrics_adapter.api.metric_reads import custom_metric_values
from metrics_adapter.api.routes import Route, RouteKind
from metrics_adapter.auth.authn import DelegatingAuthenticator
from metrics_adapter.auth.authz import Authorizer
from metrics_adapter.errors import AdapterError, MethodNotAllowedError, NotFoundError
from metrics_adapter.kube.selectors import LabelSelector
from metrics_adapter.providers.protocol import ExternalMetricInfo, MetricsProvider
from metrics_adapter.selfmetrics import AdapterMetrics
from metrics_adapter.settings import AdapterSettings

log = logging.getLogger(__name__)

FILTERS_EXTENSION = "edl.filters"
"""The app's :class:`RequestFilters` in ``app.extensions`` (the front end calls them apart)."""
INLINE_EXTENSION = "edl.inline"
"""Set (True) in ``app.extensions``: the app behind its filters never waits on the network,
so the front end may call it on its event loop."""
OFF_LOOP_EXTENSION = "edl.off_loop"
"""A predicate on a request's environ (after its filters), in ``app.extensions``: True for an
answer that costs enough CPU to hold up every other request on the loop (the whole ``/metrics``
page, a debug page of 1,000 jobs). The front end runs those on an app thread instead, where the
interpreter's switch interval lets the loop go on answering the HPAs' reads between."""
_READ_METHODS = ("GET", "HEAD")
_STREAM_ABOVE_ITEMS = 2048
_VERSION = {"major": "0", "minor": "1", "gitVersion": "v0.1.0", "platform": "python"}


def _off_loop(environ: Mapping[str, Any]) -> bool:
    """Whether the request's answer is rendered off the event loop (``OFF_LOOP_EXTENSION``)."""
    route = environ.get(ROUTE_ENVIRON_KEY)
    return isinstance(route, Route) and route.kind in (RouteKind.SELF_METRICS, RouteKind.DEBUG)


def _json(code: int, body: dict[str, Any], head: bool) -> Response:
    payload = b"" if head else json.dumps(body, separators=(",", ":")).encode()
    resp = Response(payload, status=code, mimetype="application/json")
    if head:
        resp.headers["Content-Length"] = "0"
    return resp


def create_app(
    settings: AdapterSettings,
    provider: MetricsProvider,
    metrics: AdapterMetrics,
    authenticator: DelegatingAuthenticator,
    authorizer: Authorizer,
    ready: Callable[[], bool] = lambda: True,
    clock: Callable[[], float] = time.time,
    refresh_gauges: Callable[[], None] = lambda: None,
    debug_pages: Mapping[str, Callable[[], dict[str, Any]]] | None = None,
) -> Flask:
    """Build the adapter's WSGI app around its collaborators.

    ``debug_pages`` are read-only JSON pages at ``/debug/<name>`` (e.g. the sizing plan),
    authorised like any other non-resource path.
    """
    app = Flask("metrics_adapter")
    app.extensions[INLINE_EXTENSION] = True  # it never waits on the network: run on the loop
    app.extensions[OFF_LOOP_EXTENSION] = _off_loop  # ...but for the pages that take long
    renderer = wire.MetricListRenderer()
    app.config["EDL_ADAPTER_SETTINGS"] = settings

    def dispatch(route: Route) -> Response:
        head = request.method == "HEAD"
        kind = route.kind
        if kind is RouteKind.HEALTH:
            if route.name == "readyz" and not ready():
                return Response(
                    b"" if head else b"not ready: pods not synced yet\n", 503, mimetype="text/plain"
                )
            return Response(b"" if head else b"ok", 200, mimetype="text/plain")
        if kind is RouteKind.SELF_METRICS:
            refresh_gauges()
            # ``name[]=`` keeps only those series, as the Prometheus client's own handler
            # does: with 1,000 jobs' labelled series a whole page costs a round's worth of
            # CPU on the event loop, and a bench that reads a few series twice a second
            # would measure itself.
            names = request.args.getlist("name[]")
            registry = metrics.registry.restricted_registry(names) if names else metrics.registry
            return Response(generate_latest(registry), 200, content_type=CONTENT_TYPE_LATEST)
        if kind is RouteKind.ROOT:
            return _json(200, wire.root_paths(), head)
        if kind is RouteKind.VERSION:
            return _json(200, _VERSION, head)
        if kind is RouteKind.OPENAPI:
            raise NotFoundError(
                f"the server could not find the requested resource {route.path!r} "
                "(this server publishes no OpenAPI document)"
            )
        if kind is RouteKind.DEBUG:
            page = (debug_pages or {}).get(route.name)
            if page is None:
                raise NotFoundError(
                    f"the server could not find the requested resource {route.path!r}"
                )
            return _json(200, page(), head)
        if kind is RouteKind.API_GROUP_LIST:
            return _json(200, wire.api_group_list(), head)
        if kind is RouteKind.API_GROUP:
            return _json(200, wire.api_group(route.group), head)
        if kind is RouteKind.API_RESOURCE_LIST:
            body = wire.api_resource_list(route.group, route.version, provider)
            return _json(200, body, head)
        selector = LabelSelector.parse(request.args.get("labelSelector"))
        metric_selector = LabelSelector.parse(request.args.get("metricLabelSelector"))
        if kind is RouteKind.EXTERNAL:
            info = ExternalMetricInfo(route.metric)
            external = provider.get_external_metric(route.namespace, selector, info)
            _observe_age(p.timestamp for p in external)
            return _json(200, wire.external_value_list(external), head)
        points = custom_metric_values(provider, route, selector, metric_selector)
        _observe_age(p.timestamp for p in points)
        if head:
            return Response(b"", status=200, mimetype="application/json")
        if len(points) <= _STREAM_ABOVE_ITEMS:
            return Response(
                renderer.render(route.version, points), 200, mimetype="application/json"
            )
        # Large lists stream in chunks: memory per request stays bounded at any job size.
        return Response(
            renderer.render_chunks(route.version, points), 200, mimetype="application/json"
        )

    def _observe_age(timestamps: Iterable[float]) -> None:
        oldest = min(timestamps, default=None)
        if oldest is not None:
            metrics.sample_age.observe(max(0.0, clock() - oldest))

    # Every request is answered by `handle`; this catch-all rule only spares Flask's URL map
    # the cost of failing to match (it never dispatches: `handle` always returns a response).
    def unreachable(**_: str) -> Response:
        return Response(status=500)

    app.add_url_rule("/", "edge", unreachable)
    app.add_url_rule("/<path:_rest>", "edge", unreachable)
    app.url_map.strict_slashes = False
    app.url_map.merge_slashes = False

    @app.before_request
    def handle() -> Response:
        environ = request.environ
        started = environ.get(STARTED_ENVIRON_KEY) or time.perf_counter()
        route = environ.get(ROUTE_ENVIRON_KEY)
        if route is None:  # the filters did not run: never for an app create_app built
            raise RuntimeError("the app runs behind its RequestFilters (app.wsgi_app)")
        label = route.label if isinstance(route, Route) else "invalid"
        try:
            # Only callers allowed to ask learn that the method or the path is wrong.
            if request.method not in _READ_METHODS:
                raise MethodNotAllowedError(
                    f"the server does not allow this method on the requested resource "
                    f"(method {request.method})"
                )
            if not isinstance(route, Route):
                raise route
            resp = dispatch(route)
        except AdapterError as e:
            resp = _json(e.code, wire.status(e.code, e.reason, e.message), request.method == "HEAD")
        except Exception:
            log.exception("internal error serving %s %s", request.method, raw_path(environ))
            resp = _json(
                500,
                wire.status(500, "InternalError", "an internal error occurred"),
                request.method == "HEAD",
            )
        code = resp.status_code
        metrics.request_duration.labels(label, str(code)).observe(time.perf_counter() - started)
        return resp

    filters = RequestFilters(app.wsgi_app, authenticator, authorizer, metrics)
    app.wsgi_app = filters  # type: ignore[method-assign]
    app.extensions[FILTERS_EXTENSION] = filters
    return app
