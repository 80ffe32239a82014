"""Identity headers taken verbatim, certificate validity per request, caches that forget,
and the edge's order (authenticate, authorize, then 405), through the real app edge."""

from __future__ import annotations

import datetime
import time

import pytest

from metrics_adapter.api.filters import (
    HEADER_LINES_ENVIRON_KEY,
    PEER_CERT_ENVIRON_KEY,
    USER_ENVIRON_KEY,
)
from metrics_adapter.auth.attributes import request_attributes
from metrics_adapter.auth.authn import (
    ClientCertAuthenticator,
    DelegatingAuthenticator,
    RequestHeaderAuthenticator,
    TokenReviewAuthenticator,
)
from metrics_adapter.auth.authz import SubjectAccessReviewAuthorizer
from metrics_adapter.auth.identity import RequestAttributes, UserInfo
from metrics_adapter.errors import UnauthorizedError
from tests.support.pki import issue, make_ca
from tests.unit.metrics_adapter.helpers import FakeTokenReviewer, ManualClock, build, creds, trainer

CA = make_ca("front-proxy-ca")
PROXY = issue(CA, "front-proxy-client", valid_for=datetime.timedelta(hours=1))
PATH = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/samples_per_second"


class RecordingReviewer:
    """A SubjectAccessReview seam that allows group `ml,readers` only, and records reviews."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, ...]] = []

    def review(self, attributes: RequestAttributes) -> tuple[bool, str]:
        self.seen.append(attributes.user.groups)
        return "ml,readers" in attributes.user.groups, ""


def front_proxy(clock: ManualClock | None = None) -> RequestHeaderAuthenticator:
    return RequestHeaderAuthenticator([CA.cert], ["front-proxy-client"], clock=clock or time.time)


def seen_users(h: object) -> list[str]:
    """The user each request was served as (what the access log writes), in order."""
    app = h.app  # type: ignore[attr-defined]
    inner = app.wsgi_app
    users: list[str] = []

    def recording(environ: dict[str, object], start_response: object) -> object:
        try:
            return inner(environ, start_response)
        finally:
            users.append(str(environ.get(USER_ENVIRON_KEY)))

    app.wsgi_app = recording
    return users


def lines(*pairs: tuple[str, str]) -> dict[str, object]:
    return {PEER_CERT_ENVIRON_KEY: PROXY.der, HEADER_LINES_ENVIRON_KEY: tuple(pairs)}


def test_a_comma_in_a_group_is_part_of_the_group() -> None:
    reviewer = RecordingReviewer()
    h = build(
        [trainer("t-0")],
        authenticator=DelegatingAuthenticator([front_proxy()]),
        authorizer=SubjectAccessReviewAuthorizer(reviewer, ManualClock()),
    )
    users = seen_users(h)
    client = h.app.test_client()
    # `devs,system:masters` is one group, not system:masters: reviewed, and denied
    masters = client.get(
        PATH,
        environ_base=lines(("x-remote-user", "mallory"), ("x-remote-group", "devs,system:masters")),
    )
    assert masters.status_code == 403
    assert reviewer.seen[-1] == ("devs,system:masters", "system:authenticated")
    # a real group with a comma is allowed as the cluster's RBAC says
    ok = client.get(
        PATH, environ_base=lines(("x-remote-user", "alice"), ("x-remote-group", "ml,readers"))
    )
    assert ok.status_code == 200
    assert users[-1] == "alice"
    # two lines are two groups, neither of them `ml,readers`
    split = client.get(
        PATH,
        environ_base=lines(
            ("x-remote-user", "bob"), ("x-remote-group", "ml"), ("x-remote-group", "readers")
        ),
    )
    assert split.status_code == 403
    assert reviewer.seen[-1:] == [("ml", "readers", "system:authenticated")]


def test_header_values_are_read_as_kube_apiserver_reads_them() -> None:
    auth = RequestHeaderAuthenticator(
        [CA.cert], [], username_headers=["X-Remote-User", "X-Other-User"]
    )
    user = auth.authenticate(
        creds(
            PROXY.der,
            x_remote_user=["", "second-line-ignored"],  # Go's Header.Get: the first line only
            x_other_user="carol",
            x_remote_group=["", "a,b", "c"],  # empty lines skipped, commas kept
            **{"X-Remote-Extra-Scopes%2Fx": ["", "s"], "X-Remote-Extra-Bad%zz": "v"},
        )
    )
    assert user is not None
    assert (user.name, user.groups) == ("carol", ("a,b", "c"))
    assert user.extra["scopes/x"] == ("", "s")
    assert user.extra["bad%zz"] == ("v",)  # a malformed escape keeps the key as sent


def test_an_expired_front_proxy_certificate_is_refused_on_every_later_request() -> None:
    clock = ManualClock(time.time())
    auth = front_proxy(clock)
    request = creds(PROXY.der, x_remote_user="system:kube-aggregator")
    assert auth.authenticate(request) is not None
    clock.t += 2 * 3600  # the same (cached) certificate, as on a live or resumed session
    with pytest.raises(UnauthorizedError, match="expired or is not yet valid"):
        auth.authenticate(request)
    clock.t -= 3 * 3600 + 600  # before notBefore
    with pytest.raises(UnauthorizedError, match="expired or is not yet valid"):
        auth.authenticate(request)


def test_an_expired_ca_invalidates_its_certificates_and_client_certs_too() -> None:
    short_ca = make_ca("short-ca")
    user_cert = issue(short_ca, "alice", org="ml")
    clock = ManualClock(time.time())
    auth = ClientCertAuthenticator([short_ca.cert], clock=clock)
    assert auth.authenticate(creds(user_cert.der)) == UserInfo("alice", ("ml",))
    clock.t += 2 * 86400  # past both the certificate's and the CA's end
    with pytest.raises(UnauthorizedError, match="client certificate"):
        auth.authenticate(creds(user_cert.der))


def test_token_cache_keeps_no_token_and_forgets_expired_entries() -> None:
    clock = ManualClock()
    auth = TokenReviewAuthenticator(FakeTokenReviewer(), ttl=10, clock=clock)
    auth.authenticate(creds(authorization="Bearer good"))
    with pytest.raises(UnauthorizedError):
        auth.authenticate(creds(authorization="Bearer secret-bad-token"))
    assert auth.cached == 2
    assert all(b"good" not in k and b"secret" not in k for k in auth._cache.keys())
    clock.t += 11
    auth.authenticate(creds())  # any later call drops what expired
    assert auth.cached == 0


def test_access_review_cache_forgets_expired_decisions() -> None:
    clock = ManualClock()
    authz = SubjectAccessReviewAuthorizer(RecordingReviewer(), clock, allow_ttl=10, deny_ttl=5)
    user = UserInfo("u", ("ml,readers",))
    for i in range(20):
        authz.authorize(request_attributes(user, "GET", f"{PATH}x{i}"))
    assert authz.cached == 20
    clock.t += 11
    masters = UserInfo("probe", ("system:masters",))
    authz.authorize(request_attributes(masters, "GET", "/apis"))  # skips the review, still sweeps
    assert authz.cached == 0


def test_other_methods_are_authenticated_and_authorized_before_the_405() -> None:
    reviewer = RecordingReviewer()
    h = build(
        [trainer("t-0")],
        authenticator=DelegatingAuthenticator([front_proxy()]),
        authorizer=SubjectAccessReviewAuthorizer(reviewer, ManualClock()),
    )
    users = seen_users(h)
    client = h.app.test_client()
    stranger = client.post(PATH, headers={"X-Remote-User": "admin"})  # no proxy certificate
    assert stranger.status_code == 403  # learns nothing about the method
    assert users[-1] == "system:anonymous"  # not the user it claimed
    member = client.delete(
        PATH, environ_base=lines(("x-remote-user", "alice"), ("x-remote-group", "ml,readers"))
    )
    assert member.status_code == 405
    assert member.get_json()["reason"] == "MethodNotAllowed"
    assert client.post("/healthz").status_code == 405  # health is open, its 405 too
