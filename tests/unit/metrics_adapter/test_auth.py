"""Delegated authentication and authorization (`metrics_adapter.auth`), through the app edge."""

from __future__ import annotations

import pytest

from metrics_adapter.api.filters import PEER_CERT_ENVIRON_KEY
from metrics_adapter.auth.attributes import request_attributes
from metrics_adapter.auth.authn import (
    ClientCertAuthenticator,
    DelegatingAuthenticator,
    RequestHeaderAuthenticator,
    TokenReviewAuthenticator,
)
from metrics_adapter.auth.authz import SubjectAccessReviewAuthorizer
from metrics_adapter.auth.identity import ANONYMOUS, RequestAttributes, UserInfo
from metrics_adapter.errors import ForbiddenError, UnauthorizedError
from tests.support.pki import issue, make_ca
from tests.unit.metrics_adapter.helpers import FakeTokenReviewer, ManualClock, build, creds, trainer

FRONT_PROXY_CA = make_ca("front-proxy-ca")
OTHER_CA = make_ca("other-ca")
PROXY = issue(FRONT_PROXY_CA, "front-proxy-client")
WRONG_CN = issue(FRONT_PROXY_CA, "someone-else")
SERVER_ONLY = issue(FRONT_PROXY_CA, "front-proxy-client", client=False)
FOREIGN = issue(OTHER_CA, "front-proxy-client")
USER_CERT = issue(OTHER_CA, "alice", org="ml-team")


def requestheader() -> RequestHeaderAuthenticator:
    return RequestHeaderAuthenticator([FRONT_PROXY_CA.cert], ["front-proxy-client"])


def test_requestheader_trusts_headers_from_the_front_proxy() -> None:
    user = requestheader().authenticate(
        creds(
            PROXY.der,
            x_remote_user="system:serviceaccount:kube-system:horizontal-pod-autoscaler",
            x_remote_group=["system:serviceaccounts", "system:authenticated"],
            x_remote_extra_authentication_2ekubernetes_2eio_2fpod_2dname=["p"],
            **{"X-Remote-Extra-Scopes%2Fa": "s1"},
        )
    )
    assert user is not None
    assert user.name == "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
    assert user.groups == ("system:serviceaccounts", "system:authenticated")
    assert user.extra["scopes/a"] == ("s1",)


@pytest.mark.parametrize(
    ("cert", "headers", "outcome"),
    [
        (None, {"x_remote_user": "admin"}, None),  # no client cert: headers ignored
        (FOREIGN, {"x_remote_user": "admin"}, None),  # cert of another CA: headers ignored
        (PROXY, {}, None),  # proxy without a user header
        (WRONG_CN, {"x_remote_user": "admin"}, UnauthorizedError),
        (SERVER_ONLY, {"x_remote_user": "admin"}, UnauthorizedError),
    ],
)
def test_requestheader_rejects_untrusted(cert, headers, outcome) -> None:  # type: ignore[no-untyped-def]
    der = cert.der if cert else None
    if outcome is None:
        assert requestheader().authenticate(creds(der, **headers)) is None
    else:
        with pytest.raises(outcome, match=r"cn=someone-else|client auth"):
            requestheader().authenticate(creds(der, **headers))


def test_empty_allowed_names_accepts_any_cn_of_the_ca() -> None:
    auth = RequestHeaderAuthenticator([FRONT_PROXY_CA.cert], [])
    assert auth.authenticate(creds(WRONG_CN.der, x_remote_user="u")) == UserInfo("u")


def test_client_certificate_user() -> None:
    user = ClientCertAuthenticator([OTHER_CA.cert]).authenticate(creds(USER_CERT.der))
    assert user == UserInfo("alice", ("ml-team",))
    assert ClientCertAuthenticator([FRONT_PROXY_CA.cert]).authenticate(creds(USER_CERT.der)) is None
    assert ClientCertAuthenticator([OTHER_CA.cert]).authenticate(creds(b"garbage")) is None


def test_token_review_with_cache() -> None:
    clock, reviewer = ManualClock(), FakeTokenReviewer()
    auth = TokenReviewAuthenticator(reviewer, ttl=10, clock=clock)
    assert auth.authenticate(creds(authorization="Bearer good")) == UserInfo("bob", ("devs",))
    assert auth.authenticate(creds(authorization="Bearer good")) is not None
    assert reviewer.calls == 1
    clock.t += 11
    auth.authenticate(creds(authorization="bearer good"))
    assert reviewer.calls == 2
    assert auth.authenticate(creds(authorization="Basic abc")) is None
    assert auth.authenticate(creds()) is None
    with pytest.raises(UnauthorizedError, match="invalid bearer token"):
        auth.authenticate(creds(authorization="Bearer bad"))
    reviewer.fail = True
    with pytest.raises(UnauthorizedError, match="token review failed"):
        auth.authenticate(creds(authorization="Bearer other"))


def test_delegating_adds_authenticated_group_or_falls_back_to_anonymous() -> None:
    chain = DelegatingAuthenticator([requestheader()])
    user = chain.authenticate(creds(PROXY.der, x_remote_user="u", x_remote_group="g"))
    assert user.groups == ("g", "system:authenticated")
    assert chain.authenticate(creds()) == ANONYMOUS
    with pytest.raises(UnauthorizedError):
        DelegatingAuthenticator([], allow_anonymous=False).authenticate(creds())


class FakeAccessReviewer:
    """The SubjectAccessReview seam: allows the HPA's service account only."""

    def __init__(self) -> None:
        self.calls = 0

    def review(self, attributes: RequestAttributes) -> tuple[bool, str]:
        self.calls += 1
        allowed = (
            attributes.user.name == "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
        )
        return allowed, "" if allowed else "RBAC: no rule"


HPA = UserInfo(
    "system:serviceaccount:kube-system:horizontal-pod-autoscaler", ("system:authenticated",)
)


def test_subject_access_review_cache_and_masters() -> None:
    clock, reviewer = ManualClock(), FakeAccessReviewer()
    authz = SubjectAccessReviewAuthorizer(reviewer, clock, allow_ttl=10, deny_ttl=5)
    path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/samples_per_second"
    authz.authorize(request_attributes(HPA, "GET", path))
    authz.authorize(request_attributes(HPA, "GET", path))
    assert reviewer.calls == 1
    clock.t += 11
    authz.authorize(request_attributes(HPA, "GET", path))
    assert reviewer.calls == 2
    with pytest.raises(
        ForbiddenError,
        match='User "system:anonymous" cannot get resource "pods/samples_per_second"',
    ):
        authz.authorize(request_attributes(ANONYMOUS, "GET", path))
    probe = UserInfo("system:kube-aggregator", ("system:masters",))
    authz.authorize(request_attributes(probe, "GET", "/apis/custom.metrics.k8s.io/v1beta2"))
    assert reviewer.calls == 3


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/m",
            ("get", "ml", "custom.metrics.k8s.io", "v1beta2", "pods", "m", "*"),
        ),
        (
            "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/deployments.apps/t/m",
            ("get", "ml", "custom.metrics.k8s.io", "v1beta1", "deployments.apps", "m", "t"),
        ),
        (
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/metrics/m",
            ("get", "ml", "custom.metrics.k8s.io", "v1beta2", "metrics", "", "m"),
        ),
        (
            "/apis/custom.metrics.k8s.io/v1beta2/nodes/*/m",
            ("get", "", "custom.metrics.k8s.io", "v1beta2", "nodes", "m", "*"),
        ),
        (
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/m",
            ("list", "ml", "external.metrics.k8s.io", "v1beta1", "m", "", ""),
        ),
    ],
)
def test_resource_attributes(path: str, expected: tuple[str, ...]) -> None:
    a = request_attributes(ANONYMOUS, "GET", path)
    assert a.is_resource
    assert (a.verb, a.namespace, a.group, a.version, a.resource, a.subresource, a.name) == expected


@pytest.mark.parametrize(
    "path",
    [
        "/apis",
        "/apis/custom.metrics.k8s.io",
        "/apis/custom.metrics.k8s.io/v1beta2",
        "/openapi/v2",
        "/metrics",
        "/",
    ],
)
def test_non_resource_attributes(path: str) -> None:
    a = request_attributes(ANONYMOUS, "GET", path)
    assert not a.is_resource
    assert (a.verb, a.path) == ("get", path)


def test_edge_applies_authn_and_authz() -> None:
    h = build(
        [trainer("t-0")],
        authenticator=DelegatingAuthenticator([requestheader()]),
        authorizer=SubjectAccessReviewAuthorizer(FakeAccessReviewer(), ManualClock()),
    )
    client = h.app.test_client()
    path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/samples_per_second"
    spoofed = client.get(path, headers={"X-Remote-User": HPA.name})  # no proxy certificate
    assert spoofed.status_code == 403
    assert spoofed.get_json()["reason"] == "Forbidden"
    ok = client.get(
        path, headers={"X-Remote-User": HPA.name}, environ_base={PEER_CERT_ENVIRON_KEY: PROXY.der}
    )
    assert ok.status_code == 200
    bad_cn = client.get(
        path,
        headers={"X-Remote-User": HPA.name},
        environ_base={PEER_CERT_ENVIRON_KEY: WRONG_CN.der},
    )
    assert bad_cn.status_code == 401
    assert bad_cn.get_json()["reason"] == "Unauthorized"
    for health in ("/healthz", "/livez", "/readyz"):
        assert client.get(health).status_code == 200
    # authorization happens before a bad path is reported: strangers learn nothing
    assert (
        client.get("/apis/custom.metrics.k8s.io/v1beta2/namespaces/BAD/pods/*/m").status_code == 403
    )
