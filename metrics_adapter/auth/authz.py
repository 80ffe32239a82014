"""Authorizers: always-allow (auth off) and SubjectAccessReview with a short decision cache."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from metrics_adapter.auth.blocking import may_block
from metrics_adapter.auth.identity import RequestAttributes
from metrics_adapter.bounded_cache import POINTER_BYTES, ByteBoundedLRU, estimate_nested
from metrics_adapter.errors import AuthError, ForbiddenError


class Authorizer(Protocol):
    """Decides whether a request may proceed."""

    def authorize(self, attributes: RequestAttributes) -> None:
        """Return when allowed; raise ForbiddenError otherwise."""
        ...


class AccessReviewer(Protocol):
    """Asks the cluster whether a user may do something (SubjectAccessReview)."""

    def review(self, attributes: RequestAttributes) -> tuple[bool, str]:
        """``(allowed, reason)``."""
        ...


class AlwaysAllowAuthorizer:
    """Allows everything (``--authorization none``: local demos and tests only)."""

    def authorize(self, attributes: RequestAttributes) -> None:
        """Allow."""


def describe(attributes: RequestAttributes) -> str:
    """Kubernetes-style description of a denied request."""
    user = attributes.user.name
    if not attributes.is_resource:
        return f'User "{user}" cannot {attributes.verb} path "{attributes.path}"'
    what = attributes.resource + (f"/{attributes.subresource}" if attributes.subresource else "")
    where = f' in the namespace "{attributes.namespace}"' if attributes.namespace else ""
    return (
        f'{what} "{attributes.name}" is forbidden: User "{user}" cannot {attributes.verb} '
        f'resource "{what}" in API group "{attributes.group}"{where}'
    )


ACCESS_REVIEWS_MAX_BYTES = 16 << 20
"""The SubjectAccessReview cache's budget. A key holds the request's attributes, for a
non-resource request its path (up to the 16 KiB request line: ~64 KB estimated, UCS-4), so
the old bound of 10,000 entries let them hold 160-650 MB; an HPA's decision is ~2.5 KB
estimated, some 6,500 of them fit."""


class SubjectAccessReviewAuthorizer:
    """Authorizes with SubjectAccessReview; allow/deny decisions cached (10 s by default).

    The cache is bounded in bytes (``max_bytes``, least recently used first) and expired
    decisions are dropped on every call. Members of ``always_allow_groups``
    (``system:masters``) skip the review, as the aggregator's availability probe relies on.
    """

    def __init__(
        self,
        reviewer: AccessReviewer,
        clock: Callable[[], float],
        allow_ttl: float = 10.0,
        deny_ttl: float = 10.0,
        always_allow_groups: Iterable[str] = ("system:masters",),
        max_bytes: int = ACCESS_REVIEWS_MAX_BYTES,
    ) -> None:
        self._reviewer = reviewer
        self._clock = clock
        self._allow_ttl = allow_ttl
        self._deny_ttl = deny_ttl
        self._groups = frozenset(always_allow_groups)
        self._cache: ByteBoundedLRU[tuple[object, ...], tuple[bool, str]] = ByteBoundedLRU(
            max_bytes, clock
        )
        self.reviews = 0

    @property
    def cached(self) -> int:
        """Entries in the cache (none outlive their TTL past the next call)."""
        return len(self._cache)

    @property
    def cached_bytes(self) -> int:
        """The cache's estimated bytes (at most its budget)."""
        return self._cache.bytes

    def authorize(self, attributes: RequestAttributes) -> None:
        """Allow or raise ForbiddenError (also when the review itself fails)."""
        now = self._clock()
        self._cache.expire()
        if self._groups.intersection(attributes.user.groups):
            return
        key = attributes.cache_key()
        hit = self._cache.get(key)
        if hit is not None:
            allowed, reason = hit
        else:
            may_block()
            try:
                allowed, reason = self._reviewer.review(attributes)
            except AuthError as e:
                raise ForbiddenError(f"{describe(attributes)}: authorization check failed") from e
            self.reviews += 1
            ttl = self._allow_ttl if allowed else self._deny_ttl
            size = estimate_nested(key) + POINTER_BYTES + estimate_nested((allowed, reason))
            self._cache.put(key, (allowed, reason), size, expires_at=now + ttl)
        if not allowed:
            suffix = f": {reason}" if reason else ""
            raise ForbiddenError(describe(attributes) + suffix)
