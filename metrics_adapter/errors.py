"""The adapter's own exception types.

Each carries the HTTP status code and the Kubernetes ``metav1.Status`` reason it is rendered as
at the edge (see :mod:`metrics_adapter.api.wire_shapes`). Callers raise them ``from`` the
underlying cause.
"""

from __future__ import annotations

from edl_common.errors import ConfigError

__all__ = [
    "AdapterError",
    "AuthError",
    "BadRequestError",
    "ConfigError",
    "ForbiddenError",
    "InternalError",
    "InvalidPathError",
    "InvalidSelectorError",
    "MethodNotAllowedError",
    "NotFoundError",
    "ScrapeError",
    "SourceError",
    "UnauthorizedError",
]


class AdapterError(Exception):
    """Base class: an error with a Kubernetes Status code and reason."""

    code = 500
    reason = "InternalError"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequestError(AdapterError):
    """The request is malformed (path, query, selector)."""

    code = 400
    reason = "BadRequest"


class InvalidPathError(BadRequestError):
    """The URL path does not name a valid metrics resource."""


class InvalidSelectorError(BadRequestError):
    """A label selector could not be parsed; the message names the bad token."""


class NotFoundError(AdapterError):
    """The metric or the described object is unknown."""

    code = 404
    reason = "NotFound"


class MethodNotAllowedError(AdapterError):
    """Only GET (and HEAD) are served."""

    code = 405
    reason = "MethodNotAllowed"


class UnauthorizedError(AdapterError):
    """The caller could not be authenticated."""

    code = 401
    reason = "Unauthorized"


class ForbiddenError(AdapterError):
    """The caller is authenticated but not allowed."""

    code = 403
    reason = "Forbidden"


class InternalError(AdapterError):
    """Something failed inside the adapter; the message never leaks details."""


class ScrapeError(Exception):
    """A scrape of one target failed (timeout, bad status, garbage body)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class SourceError(Exception):
    """A metrics source (Kubernetes, Prometheus) failed."""


class AuthError(Exception):
    """A delegated authentication or authorization call failed."""
