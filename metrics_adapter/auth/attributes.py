"""Request attributes for authorization, following kube-apiserver's RequestInfo rules."""

from __future__ import annotations

from metrics_adapter.auth.identity import RequestAttributes, UserInfo

# kube-apiserver's verbs for the write methods of resource requests (RequestInfo).
_RESOURCE_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def request_attributes(user: UserInfo, method: str, path: str) -> RequestAttributes:
    """Attributes of a request to ``path`` (decoded, no query).

    ``/apis/<group>/<version>/...`` paths with a resource are resource requests (a GET with a
    name is ``get``, without one ``list``); everything else (discovery, OpenAPI, ``/metrics``)
    is a non-resource request with verb ``get``.
    """
    verb = "get" if method in ("GET", "HEAD") else method.lower()
    parts = [p for p in path.split("/") if p]
    if len(parts) < 4 or parts[0] != "apis":
        return RequestAttributes(user, verb, path, is_resource=False)
    verb = _RESOURCE_VERBS.get(method, verb)
    group, version, rest = parts[1], parts[2], parts[3:]
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        rest = rest[2:] if len(rest) > 2 else ["namespaces", rest[1]]
        if rest[0] == "namespaces":
            namespace = ""
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if verb == "get" and not name:
        verb = "list"
    elif verb == "delete" and not name:
        verb = "deletecollection"
    return RequestAttributes(
        user, verb, path, True, namespace, group, version, resource, subresource, name
    )
