"""Rotation of the front-proxy CA and allowed names from the cluster's auth ConfigMap."""

from __future__ import annotations

import ssl

from metrics_adapter.auth.authn import ClientCertAuthenticator, RequestHeaderAuthenticator
from metrics_adapter.auth.identity import Credentials
from metrics_adapter.auth.trust import ClientTrust, TlsClientTrust, TrustRefresher
from metrics_adapter.errors import SourceError
from tests.support.pki import issue, make_ca

OLD, NEW = make_ca("front-proxy-ca-1"), make_ca("front-proxy-ca-2")


def proxy_request(der: bytes) -> Credentials:
    lists = {"x-remote-user": ("system:kube-aggregator",)}
    return Credentials({k: v[0] for k, v in lists.items()}, lists, der)


def test_rotated_ca_and_names_apply_without_restart() -> None:
    current = ClientTrust(requestheader_ca_pem=OLD.pem, allowed_names=["front-proxy-client"])
    requestheader = RequestHeaderAuthenticator([OLD.cert], current.allowed_names)
    client_cert = ClientCertAuthenticator([])
    tls = TlsClientTrust()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.attach(context)
    answers: list[ClientTrust | Exception] = [
        ClientTrust(requestheader_ca_pem=NEW.pem, allowed_names=["aggregator"]),
        SourceError("apiserver unreachable"),
    ]

    def read() -> ClientTrust:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    refresher = TrustRefresher(read, current, requestheader, client_cert, tls, 60)
    old_proxy = issue(OLD, "front-proxy-client")
    new_proxy = issue(NEW, "aggregator")
    assert requestheader.authenticate(proxy_request(old_proxy.der)) is not None
    assert requestheader.authenticate(proxy_request(new_proxy.der)) is None

    assert refresher.refresh()
    assert requestheader.authenticate(proxy_request(new_proxy.der)) is not None
    assert requestheader.authenticate(proxy_request(old_proxy.der)) is None  # old CA dropped
    assert context.verify_mode == ssl.CERT_OPTIONAL
    assert context.cert_store_stats()["x509_ca"] == 1

    assert not refresher.refresh()  # a failed read keeps what we have
    assert requestheader.authenticate(proxy_request(new_proxy.der)) is not None
