"""Client certificates through intermediate CAs, as `cryptography`'s verifier judges them.

The bundle (`--client-ca-file`, the requestheader CA) may hold intermediates beside the root,
as kube-apiserver allows. These are the cases a loop asking "did a certificate of the bundle
sign this?" got wrong: it accepted a signer that is no CA, ignored the EKUs an intermediate
restricts its leaves to, and never looked past the direct issuer's validity.
"""

from __future__ import annotations

import datetime
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from metrics_adapter.auth.authn import ClientCertAuthenticator
from metrics_adapter.auth.identity import Credentials, UserInfo
from metrics_adapter.errors import UnauthorizedError
from tests.support.pki import Issued, make_ca
from tests.unit.metrics_adapter.helpers import ManualClock

pytestmark = pytest.mark.unit

NOW = datetime.datetime.now(datetime.UTC)
HOUR = datetime.timedelta(hours=1)


def certificate(
    issuer: Issued,
    cn: str,
    *,
    ca: bool | None = None,
    usages: list[x509.ObjectIdentifier] | None = None,
    starts: datetime.timedelta = -HOUR,
    ends: datetime.timedelta = 24 * HOUR,
) -> Issued:
    """A certificate of `issuer`: a CA when `ca` (None: no basicConstraints), EKU `usages`."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(issuer.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW + starts)
        .not_valid_after(NOW + ends)
    )
    if ca is not None:
        builder = builder.add_extension(x509.BasicConstraints(ca=ca, path_length=None), True)
    if ca:
        usage = x509.KeyUsage(True, False, False, False, False, True, True, False, False)
        builder = builder.add_extension(usage, critical=True)
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    return Issued(builder.sign(issuer.key, hashes.SHA256()), key)


ROOT = make_ca("client-root")
CLIENT = [ExtendedKeyUsageOID.CLIENT_AUTH]


def authenticate(bundle: list[Issued], leaf: Issued, at: float | None = None) -> UserInfo | None:
    clock = ManualClock(time.time() if at is None else at)
    auth = ClientCertAuthenticator([c.cert for c in bundle], clock=clock)
    return auth.authenticate(Credentials({}, {}, leaf.der))


def test_a_leaf_of_an_intermediate_in_the_bundle_is_authenticated() -> None:
    intermediate = certificate(ROOT, "client-intermediate", ca=True)
    leaf = certificate(intermediate, "alice", usages=CLIENT)
    assert authenticate([ROOT, intermediate], leaf) == UserInfo("alice", ())


def test_a_signer_that_is_no_ca_issues_nothing() -> None:
    """A leaf certificate of the bundle (basicConstraints CA:FALSE, or none) cannot sign."""
    for flag in (False, None):
        not_a_ca = certificate(ROOT, "some-client", ca=flag, usages=CLIENT)
        forged = certificate(not_a_ca, "system:masters-wannabe", usages=CLIENT)
        assert authenticate([ROOT, not_a_ca], forged) is None


def test_an_intermediate_limited_to_server_auth_issues_no_client_certificate() -> None:
    servers_only = certificate(
        ROOT, "serving-intermediate", ca=True, usages=[ExtendedKeyUsageOID.SERVER_AUTH]
    )
    leaf = certificate(servers_only, "alice", usages=CLIENT)
    assert authenticate([ROOT, servers_only], leaf) is None  # as from a CA not in the bundle


def test_a_leaf_for_server_auth_only_is_refused() -> None:
    intermediate = certificate(ROOT, "client-intermediate", ca=True)
    server = certificate(intermediate, "web", usages=[ExtendedKeyUsageOID.SERVER_AUTH])
    with pytest.raises(UnauthorizedError, match="not valid for client auth"):
        authenticate([ROOT, intermediate], server)


def test_an_expired_intermediate_ends_its_leaves() -> None:
    intermediate = certificate(ROOT, "client-intermediate", ca=True, ends=2 * HOUR)
    leaf = certificate(intermediate, "alice", usages=CLIENT)
    assert authenticate([ROOT, intermediate], leaf) is not None
    later = (NOW + 3 * HOUR).timestamp()  # the leaf is still in its own window
    with pytest.raises(UnauthorizedError, match="expired or is not yet valid"):
        authenticate([ROOT, intermediate], leaf, at=later)
