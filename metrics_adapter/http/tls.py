"""Serving certificates: given files (reloaded when they change), or a self-signed pair."""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import ipaddress
import logging
import os
import shutil
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from metrics_adapter.settings import SELF_SIGNED_HOSTNAMES

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServingCert:
    """Paths of the serving certificate and key."""

    cert_file: Path
    key_file: Path
    generated: bool = False
    owned_dir: Path | None = None
    """A temporary folder made for a generated pair: removed by :meth:`cleanup`."""

    def cleanup(self) -> None:
        """Remove the temporary folder of a generated pair (a no-op otherwise)."""
        if self.owned_dir is not None:
            shutil.rmtree(self.owned_dir, ignore_errors=True)


def _write_private(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` atomically with exactly ``mode``.

    An old file's mode is not kept: the content goes to a fresh file that replaces it.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    _write_private(key_file, key_pem, 0o600)
    _write_private(cert_file, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return ServingCert(cert_file, key_file, generated=True)


def ensure_serving_cert(
    cert_file: Path | None, key_file: Path | None, cert_dir: Path | None
) -> ServingCert:
    """The given cert and key, or a freshly generated self-signed pair.

    Without ``cert_dir`` the pair goes to a new temporary folder that
    :meth:`ServingCert.cleanup` removes (the server does at exit).
    """
    if cert_file and key_file:
        return ServingCert(cert_file, key_file)
    if cert_file or key_file:
        raise ValueError("--tls-cert-file and --tls-private-key-file go together")
    owned = None if cert_dir else Path(tempfile.mkdtemp(prefix="edl-adapter-cert-"))
    directory = cert_dir or owned
    assert directory is not None
    pair = generate_self_signed(directory, list(SELF_SIGNED_HOSTNAMES))
    return ServingCert(pair.cert_file, pair.key_file, generated=True, owned_dir=owned)


def server_context(cert: ServingCert, client_ca: bytes | Path | None) -> ssl.SSLContext:
    """A TLS server context; client certificates requested (optional) when a CA is given.

    ``client_ca`` is a PEM bundle (bytes) or a file of one.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert.cert_file), str(cert.key_file))
    if isinstance(client_ca, Path):
        client_ca = client_ca.read_bytes()
    if client_ca:
        context.load_verify_locations(cadata=client_ca.decode())
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


@contextlib.contextmanager
def _private_file(data: bytes) -> Iterator[Path]:
    """A path that reads as `data`, for OpenSSL's file-only loader, readable by no one else.

    An anonymous memory file (memfd, seen through /proc/self/fd) where Linux has one, so a
    read-only root without a writable /tmp still reloads; else a file in a temporary folder.
    """
    if hasattr(os, "memfd_create") and Path("/proc/self/fd").is_dir():
        fd = os.memfd_create("edl-adapter-pair", getattr(os, "MFD_CLOEXEC", 0))
        try:
            os.write(fd, data)
            yield Path(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="edl-adapter-reload-") as tmp:
        combined = Path(tmp) / "pair.pem"
        _write_private(combined, data, 0o600)
        yield combined


class CertReloader:
    """Loads a rotated serving pair into the live context: new connections get the new pair.

    cert-manager (or a Secret volume update) rewrites both files; a pair that does not load
    (half written, key not matching) is logged once and the current pair keeps serving until
    the files change again. Connections already open keep the pair they started with.
    """

    def __init__(self, cert: ServingCert, context: ssl.SSLContext) -> None:
        self._cert = cert
        self._context = context
        pair = self._read()
        self._seen = hashlib.sha256(pair).hexdigest() if pair else None
        self.reloads = 0

    def _read(self) -> bytes | None:
        try:
            cert = self._cert.cert_file.read_bytes()
            key = self._cert.key_file.read_bytes()
        except OSError:
            return None
        return cert.rstrip() + b"\n" + key

    def check(self) -> bool:
        """Reload when the files changed; returns whether a new pair is now served."""
        pair = self._read()
        digest = hashlib.sha256(pair).hexdigest() if pair else None
        if pair is None or digest == self._seen:
            return False
        self._seen = digest
        # The pair is read once and loaded from one private copy: first into a scratch
        # context, because a failed load leaves an OpenSSL context half-changed (new cert, old
        # key: every handshake fails), then into the live one.
        try:
            with _private_file(pair) as combined:
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(combined))
                self._context.load_cert_chain(str(combined))
        except (ssl.SSLError, OSError, ValueError) as e:
            log.error("keeping the current serving certificate: the new pair does not load: %s", e)
            return False
        self.reloads += 1
        log.info("serving certificate reloaded from %s", self._cert.cert_file)
        return True
