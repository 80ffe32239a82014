"""Authentication and authorisation before the app, as kube-apiserver's filters do.

kube-apiserver runs ``WithAuthentication`` and ``WithAuthorization`` around its handler: by the
time a handler runs, the user is known and allowed. :class:`RequestFilters` is that chain for
the adapter: a WSGI middleware around the Flask app (``app.wsgi_app``, Flask's way to add
one), so a plain WSGI server and Flask's test client get the same answers as the front end.

The front end (:mod:`metrics_adapter.http.server`) calls :meth:`RequestFilters.admit` and the
app apart: the filters may wait on the network (an uncached TokenReview or
SubjectAccessReview), the app never does. So the filters run on the event loop inside
:func:`~metrics_adapter.auth.blocking.on_loop` and, where they would wait
(:class:`~metrics_adapter.auth.blocking.WouldBlock`, raised before any side effect), again on
a thread; the app runs once, after them, on the loop.

What the filters leave in the environ for the app: the parsed route (or the path's error,
raised only to a caller allowed to ask), the user's name for the access log, and when the
request started (the request-duration histogram covers the filters too).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

from werkzeug.datastructures import EnvironHeaders

from metrics_adapter.api import wire_shapes as wire
from metrics_adapter.api.routes import Route, RouteKind, parse_path, split_raw_path
from metrics_adapter.auth.attributes import request_attributes
from metrics_adapter.auth.authn import DelegatingAuthenticator
from metrics_adapter.auth.authz import AlwaysAllowAuthorizer, Authorizer
from metrics_adapter.auth.blocking import WouldBlock
from metrics_adapter.auth.identity import Credentials
from metrics_adapter.errors import AdapterError
from metrics_adapter.selfmetrics import AdapterMetrics

log = logging.getLogger(__name__)

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

PEER_CERT_ENVIRON_KEY = "edl.peer_cert_der"
"""The TLS peer certificate (DER), set by the front end."""
HEADER_LINES_ENVIRON_KEY = "edl.header_lines"
"""((lower-case name, value), ...) per header line, verbatim, set by the front end."""
USER_ENVIRON_KEY = "edl.user"
"""The authenticated user's name, for the access log."""
ROUTE_ENVIRON_KEY = "edl.route"
"""The parsed :class:`Route`, or the :class:`AdapterError` the path raised."""
STARTED_ENVIRON_KEY = "edl.started"
"""``time.perf_counter()`` when the filters took the request."""
_NO_CREDENTIALS = Credentials({}, {})


@dataclass(frozen=True)
class Denial:
    """A request the filters answer themselves (401, 403, 500): a ``metav1.Status``."""

    code: int
    body: bytes
    """The Status as JSON (empty for a HEAD request)."""

    @property
    def headers(self) -> list[tuple[str, str]]:
        """The answer's headers."""
        return [("Content-Type", "application/json"), ("Content-Length", str(len(self.body)))]


def _credentials(environ: dict[str, Any]) -> Credentials:
    """The request's headers as kube-apiserver sees them: one value per header line, verbatim.

    A group named ``a,b`` stays one group. The front end passes the lines; a plain WSGI
    environ (Flask's test client) has one value per header name.
    """
    lines = environ.get(HEADER_LINES_ENVIRON_KEY)
    if lines is None:
        lines = [(name.lower(), value) for name, value in EnvironHeaders(environ).items()]
    lists: dict[str, tuple[str, ...]] = {}
    for key, value in lines:
        lists[key] = (*lists.get(key, ()), value)
    first = {k: v[0] for k, v in lists.items()}
    return Credentials(first, lists, environ.get(PEER_CERT_ENVIRON_KEY))


def raw_path(environ: dict[str, Any]) -> str:
    """The request target as sent (percent-encoding kept), else the decoded path re-encoded."""
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    return str(raw) if raw else quote(str(environ.get("PATH_INFO") or "/"))


class RequestFilters:
    """Authentication, then authorisation, around ``app`` (a WSGI middleware).

    Health paths (``/healthz``, ``/livez``, ``/readyz``) pass unauthenticated, as
    kube-apiserver's do. Errors of the path and the method are the app's to raise, after the
    filters: only a caller allowed to ask learns them.
    """

    def __init__(
        self,
        app: WsgiApp,
        authenticator: DelegatingAuthenticator,
        authorizer: Authorizer,
        metrics: AdapterMetrics,
    ) -> None:
        self.app = app
        """The app the filters guard (Flask's own ``wsgi_app``)."""
        self._authenticator = authenticator
        self._authorizer = authorizer
        self._allow_all = isinstance(authorizer, AlwaysAllowAuthorizer)
        self._metrics = metrics

    def admit(self, environ: dict[str, Any]) -> Denial | None:
        """Authenticate and authorise; None: the app may answer (the environ says who asked).

        Raises:
            WouldBlock: on the event loop, before any side effect, where a review must be
                asked of kube-apiserver: run it again on a thread.
        """
        started = environ.setdefault(STARTED_ENVIRON_KEY, time.perf_counter())
        raw = raw_path(environ)
        route: Route | AdapterError
        try:
            route = parse_path(split_raw_path(raw))
        except AdapterError as e:
            route = e
        label = route.label if isinstance(route, Route) else "invalid"
        try:
            if not isinstance(route, Route) or route.kind is not RouteKind.HEALTH:
                needs = self._authenticator.needs_credentials
                credentials = _credentials(environ) if needs else _NO_CREDENTIALS
                user = self._authenticator.authenticate(credentials)
                environ[USER_ENVIRON_KEY] = user.name
                if not self._allow_all:
                    path = route.path if isinstance(route, Route) else str(environ["PATH_INFO"])
                    method = str(environ.get("REQUEST_METHOD", "GET"))
                    self._authorizer.authorize(request_attributes(user, method, path))
        except AdapterError as e:
            return self._deny(environ, label, e.code, e.reason, e.message, started)
        except WouldBlock:
            raise
        except Exception:
            log.exception("internal error authenticating %s %s", environ.get("REQUEST_METHOD"), raw)
            return self._deny(
                environ, label, 500, "InternalError", "an internal error occurred", started
            )
        environ[ROUTE_ENVIRON_KEY] = route
        return None

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        """The whole chain, for a plain WSGI server (and Flask's test client)."""
        denial = self.admit(environ)
        if denial is not None:
            start_response(f"{denial.code} {_reason_phrase(denial.code)}", denial.headers)
            return [denial.body]
        return self.app(environ, start_response)

    def _deny(
        self,
        environ: dict[str, Any],
        label: str,
        code: int,
        reason: str,
        message: str,
        started: float,
    ) -> Denial:
        body = json.dumps(wire.status(code, reason, message), separators=(",", ":")).encode()
        if environ.get("REQUEST_METHOD") == "HEAD":
            body = b""
        self._metrics.request_duration.labels(label, str(code)).observe(
            time.perf_counter() - started
        )
        environ.setdefault(USER_ENVIRON_KEY, "-")
        return Denial(code, body)


def _reason_phrase(code: int) -> str:
    try:
        return HTTPStatus(code).phrase
    except ValueError:
        return "Error"
