"""Small test PKI: a CA and certificates signed by it (real X.509 via cryptography)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Issued:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def der(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.DER)

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


def load_issued(cert: Path, key: Path) -> Issued:
    """A CA (or any pair) written as PEM files, e.g. the e2e cluster CA, to issue from."""
    private = serialization.load_pem_private_key(key.read_bytes(), None)
    if not isinstance(private, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{key}: not an EC private key")
    return Issued(x509.load_pem_x509_certificate(cert.read_bytes()), private)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def make_ca(cn: str = "test-ca") -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return Issued(cert, key)


def issue(
    ca: Issued,
    cn: str,
    org: str | None = None,
    client: bool = True,
    valid_for: datetime.timedelta = datetime.timedelta(days=1),
    san: list[x509.GeneralName] | None = None,
) -> Issued:
    """A certificate of ``ca`` (client or server auth) valid from 5 min ago for ``valid_for``."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn, org))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + valid_for)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if san:
        cert = cert.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return Issued(cert.sign(ca.key, hashes.SHA256()), key)
