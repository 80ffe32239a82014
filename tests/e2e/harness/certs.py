"""Certificates for a loopback control plane, made with `cryptography` (ECDSA P-256).

One cluster CA signs the kube-apiserver serving certificate, the admin client certificate and
the adapter's serving certificate; a separate front-proxy CA signs the aggregator's client
certificate (CN `front-proxy-client`), exactly as kubeadm lays them out.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=2)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, as PEM files on disk."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class ClusterPKI:
    """Every file the control plane, the adapter and the clients need."""

    ca: KeyPair
    apiserver: KeyPair
    admin: KeyPair
    front_proxy_ca: KeyPair
    front_proxy_client: KeyPair
    adapter: KeyPair
    service_account_key: Path
    kubelet_client: KeyPair
    """kube-apiserver's client certificate towards kubelets (logs, exec), as kubeadm's
    `apiserver-kubelet-client`: a real node (harness/kubelet_node.py) trusts the cluster CA."""


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,  # SEC1: what keyutil parses
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


class _Authority:
    def __init__(self, cn: str, directory: Path, stem: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        self.name = _name(cn)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )
        self.pair = KeyPair(directory / f"{stem}.crt", directory / f"{stem}.key")
        self.pair.cert.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        _write_key(self.key, self.pair.key)

    @classmethod
    def load(cls, pair: KeyPair) -> _Authority:
        """The authority whose certificate and key `make_cluster_pki` wrote."""
        self = cls.__new__(cls)
        key = serialization.load_pem_private_key(pair.key.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise TypeError(f"{pair.key} is not an EC key")
        self.key = key
        self.cert = x509.load_pem_x509_certificate(pair.cert.read_bytes())
        self.name = self.cert.subject
        self.pair = pair
        return self

    def issue(
        self,
        directory: Path,
        stem: str,
        cn: str,
        *,
        org: str | None = None,
        server: bool = False,
        dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
    ) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn, org))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if dns or ips:
            names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
            names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        pair = KeyPair(directory / f"{stem}.crt", directory / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, pair.key)
        return pair


def make_cluster_pki(directory: Path, *, adapter_service_dns: tuple[str, ...]) -> ClusterPKI:
    """Writes a fresh PKI into `directory` and returns where each file is.

    Args:
        directory: an empty folder that will hold the PEM files.
        adapter_service_dns: DNS names for the adapter's serving certificate; the aggregator
            verifies `<service>.<namespace>.svc` against the APIService's caBundle.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca = _Authority("edl-e2e-cluster-ca", directory, "ca")
    front = _Authority("edl-e2e-front-proxy-ca", directory, "front-proxy-ca")
    apiserver = ca.issue(
        directory,
        "apiserver",
        "kube-apiserver",
        server=True,
        dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
        ips=("127.0.0.1", "10.0.0.1"),
    )
    admin = ca.issue(directory, "admin", "edl-e2e-admin", org="system:masters")
    client = front.issue(directory, "front-proxy-client", "front-proxy-client")
    adapter = ca.issue(
        directory,
        "adapter",
        "edl-metrics-adapter",
        server=True,
        dns=("localhost", *adapter_service_dns),
        ips=("127.0.0.1",),
    )
    kubelet_client = ca.issue(
        directory, "apiserver-kubelet-client", "kube-apiserver-kubelet-client", org="system:masters"
    )
    sa_key = directory / "sa.key"
    _write_key(ec.generate_private_key(ec.SECP256R1()), sa_key)
    return ClusterPKI(
        ca=ca.pair,
        apiserver=apiserver,
        admin=admin,
        front_proxy_ca=front.pair,
        front_proxy_client=client,
        adapter=adapter,
        service_account_key=sa_key,
        kubelet_client=kubelet_client,
    )


def issue_client_cert(ca: KeyPair, directory: Path, stem: str, cn: str, org: str) -> KeyPair:
    """A client certificate signed by the cluster CA `ca` (e.g. a kubelet's:
    `system:node:<name>` in `system:nodes`), written as `<stem>.crt`/`<stem>.key`."""
    directory.mkdir(parents=True, exist_ok=True)
    return _Authority.load(ca).issue(directory, stem, cn, org=org)


def issue_serving_cert(
    ca: KeyPair, directory: Path, stem: str, cn: str, *, dns: tuple[str, ...], ips: tuple[str, ...]
) -> KeyPair:
    """A serving certificate signed by the cluster CA `ca` (e.g. a kubelet's)."""
    directory.mkdir(parents=True, exist_ok=True)
    return _Authority.load(ca).issue(directory, stem, cn, server=True, dns=dns, ips=ips)


def make_webhook_pki(directory: Path, cn: str, dns: tuple[str, ...]) -> tuple[KeyPair, KeyPair]:
    """A CA of its own and the serving certificate it signs, for a webhook server.

    Returns (the CA: its certificate is the webhook configurations' caBundle, the serving
    pair as ``tls.crt``/``tls.key``: the names controller-runtime's webhook server reads).
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca = _Authority(f"{cn}-ca", directory, "ca")
    return ca.pair, ca.issue(directory, "tls", cn, server=True, dns=dns)
