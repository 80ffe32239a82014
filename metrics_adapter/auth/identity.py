"""Who is asking, and what they ask for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class UserInfo:
    """An authenticated (or anonymous) user, as Kubernetes describes one."""

    name: str
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    uid: str = ""

    def cache_key(self) -> tuple[object, ...]:
        """A hashable identity for authorization caches."""
        return (self.name, self.uid, self.groups, tuple(sorted(self.extra.items())))


ANONYMOUS = UserInfo("system:anonymous", ("system:unauthenticated",))


@dataclass(frozen=True)
class RequestAttributes:
    """What a SubjectAccessReview asks about (resource or non-resource request)."""

    user: UserInfo
    verb: str
    path: str
    is_resource: bool
    namespace: str = ""
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""

    def cache_key(self) -> tuple[object, ...]:
        """A hashable form for the decision cache."""
        what = (
            (self.namespace, self.group, self.version, self.resource, self.subresource, self.name)
            if self.is_resource
            else (self.path,)
        )
        return (self.user.cache_key(), self.verb, self.is_resource, what)


@dataclass(frozen=True)
class Credentials:
    """What a request brings to be authenticated."""

    headers: Mapping[str, str]
    header_lists: Mapping[str, tuple[str, ...]]
    peer_cert_der: bytes | None = None
