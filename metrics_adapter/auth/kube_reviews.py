"""TokenReview and SubjectAccessReview through the official ``kubernetes`` client."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from metrics_adapter.auth.identity import RequestAttributes, UserInfo
from metrics_adapter.errors import AuthError


class KubernetesTokenReviewer:
    """TokenReview (authentication.k8s.io/v1) with a request timeout."""

    def __init__(self, api_client: Any, timeout: float = 10.0) -> None:
        self._api = k8s.AuthenticationV1Api(api_client)
        self._timeout = timeout

    def review(self, token: str) -> UserInfo | None:
        """The token's user, or None when the cluster says it is not authenticated."""
        body = k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=token))
        try:
            result = self._api.create_token_review(body, _request_timeout=self._timeout)
        except Exception as e:
            raise AuthError(f"TokenReview failed: {e}") from e
        status = result.status
        if status is None or not status.authenticated or status.user is None:
            return None
        user = status.user
        extra = {k: tuple(v) for k, v in (user.extra or {}).items()}
        return UserInfo(user.username or "", tuple(user.groups or ()), extra, user.uid or "")


class KubernetesAccessReviewer:
    """SubjectAccessReview (authorization.k8s.io/v1) with a request timeout."""

    def __init__(self, api_client: Any, timeout: float = 10.0) -> None:
        self._api = k8s.AuthorizationV1Api(api_client)
        self._timeout = timeout

    def review(self, attributes: RequestAttributes) -> tuple[bool, str]:
        """``(allowed, reason)`` from the cluster's authorizer."""
        user = attributes.user
        resource = non_resource = None
        if attributes.is_resource:
            resource = k8s.V1ResourceAttributes(
                namespace=attributes.namespace or None,
                verb=attributes.verb,
                group=attributes.group,
                version=attributes.version,
                resource=attributes.resource,
                subresource=attributes.subresource or None,
                name=attributes.name or None,
            )
        else:
            non_resource = k8s.V1NonResourceAttributes(path=attributes.path, verb=attributes.verb)
        spec = k8s.V1SubjectAccessReviewSpec(
            user=user.name,
            groups=list(user.groups),
            extra={k: list(v) for k, v in user.extra.items()} or None,
            uid=user.uid or None,
            resource_attributes=resource,
            non_resource_attributes=non_resource,
        )
        try:
            result = self._api.create_subject_access_review(
                k8s.V1SubjectAccessReview(spec=spec), _request_timeout=self._timeout
            )
        except Exception as e:
            raise AuthError(f"SubjectAccessReview failed: {e}") from e
        status = result.status
        return bool(status and status.allowed), str((status and status.reason) or "")
