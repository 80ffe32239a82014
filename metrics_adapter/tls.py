"""Serving certificates: given files, or a self-signed one generated at start."""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class ServingCert:
    """Paths of the serving certificate and key."""

    cert_file: Path
    key_file: Path
    generated: bool = False


def generate_self_signed(directory: Path, hostnames: list[str], days: int = 365) -> ServingCert:
    """Write a self-signed ECDSA P-256 serving certificate for ``hostnames`` and loopback."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    names: list[x509.GeneralName] = [x509.DNSName(h) for h in dict.fromkeys(hostnames)]
    names += [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostnames[0])])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file = directory / "apiserver.crt"
    key_file = directory / "apiserver.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return ServingCert(cert_file, key_file, generated=True)


def ensure_serving_cert(
    cert_file: Path | None, key_file: Path | None, cert_dir: Path | None
) -> ServingCert:
    """The given cert and key, or a freshly generated self-signed pair."""
    if cert_file and key_file:
        return ServingCert(cert_file, key_file)
    if cert_file or key_file:
        raise ValueError("--tls-cert-file and --tls-private-key-file go together")
    directory = cert_dir or Path(tempfile.mkdtemp(prefix="edl-adapter-cert-"))
    return generate_self_signed(
        directory, ["localhost", "edl-metrics-adapter", "edl-metrics-adapter.edl-system.svc"]
    )


def server_context(cert: ServingCert, client_ca_file: Path | None) -> ssl.SSLContext:
    """A TLS server context; client certificates requested (optional) when a CA is given."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert.cert_file), str(cert.key_file))
    if client_ca_file is not None:
        context.load_verify_locations(cafile=str(client_ca_file))
        context.verify_mode = ssl.CERT_OPTIONAL
    return context
