"""Authorizers: always-allow (auth off) and SubjectAccessReview with a short decision cache."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Protocol

from metrics_adapter.auth.authn import drop_expired
from metrics_adapter.auth.identity import RequestAttributes
from metrics_adapter.errors import AuthError, ForbiddenError
from metrics_adapter.http.blocking import may_block


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


class SubjectAccessReviewAuthorizer:
    """Authorizes with SubjectAccessReview; allow/deny decisions cached (10 s by default).

    Expired decisions are dropped on every call. Members of ``always_allow_groups``
    (``system:masters``) skip the review, as the aggregator's availability probe relies on.
    """

    def __init__(
        self,
        reviewer: AccessReviewer,
        clock: Callable[[], float],
        allow_ttl: float = 10.0,
        deny_ttl: float = 10.0,
        always_allow_groups: Iterable[str] = ("system:masters",),
        max_entries: int = 10_000,
    ) -> None:
        self._reviewer = reviewer
        self._clock = clock
        self._allow_ttl = allow_ttl
        self._deny_ttl = deny_ttl
        self._groups = frozenset(always_allow_groups)
        self._max = max_entries
        self._cache: OrderedDict[tuple[object, ...], tuple[float, bool, str]] = OrderedDict()
        self._lock = threading.Lock()
        self.reviews = 0

    @property
    def cached(self) -> int:
        """Entries in the cache (none outlive their TTL past the next call)."""
        return len(self._cache)

    def authorize(self, attributes: RequestAttributes) -> None:
        """Allow or raise ForbiddenError (also when the review itself fails)."""
        now = self._clock()
        if self._cache:
            with self._lock:
                drop_expired(self._cache, now)
        if self._groups.intersection(attributes.user.groups):
            return
        key = attributes.cache_key()
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            allowed, reason = hit[1], hit[2]
        else:
            may_block()
            try:
                allowed, reason = self._reviewer.review(attributes)
            except AuthError as e:
                raise ForbiddenError(f"{describe(attributes)}: authorization check failed") from e
            self.reviews += 1
            ttl = self._allow_ttl if allowed else self._deny_ttl
            with self._lock:
                self._cache[key] = (now + ttl, allowed, reason)
                self._cache.move_to_end(key)
                while len(self._cache) > self._max:
                    self._cache.popitem(last=False)
        if not allowed:
            suffix = f": {reason}" if reason else ""
            raise ForbiddenError(describe(attributes) + suffix)
