"""Serving certificates: private key modes, the temporary folder, reload on rotation."""

from __future__ import annotations

import ssl
import stat
import tempfile
from pathlib import Path

import pytest
from cryptography import x509

from metrics_adapter.http.tls import CertReloader, ServingCert, ensure_serving_cert, server_context
from tests.support.pki import Issued, issue, make_ca


def served_subject(context: ssl.SSLContext) -> str:
    """The CN a client sees in a handshake with ``context`` (in memory, no socket)."""
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    c = client.wrap_bio(c_in, c_out)
    s = context.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side in (c, s):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    der = c.getpeercert(binary_form=True)
    assert der is not None
    return str(x509.load_der_x509_certificate(der).subject.rfc4514_string())


def write_pair(directory: Path, pair: Issued) -> ServingCert:
    cert = ServingCert(directory / "tls.crt", directory / "tls.key")
    cert.cert_file.write_bytes(pair.pem)
    cert.key_file.write_bytes(pair.key_pem)
    return cert


def test_a_generated_key_is_0600_even_over_an_old_world_readable_file(tmp_path: Path) -> None:
    old = tmp_path / "apiserver.key"
    old.write_bytes(b"old")
    old.chmod(0o644)
    cert = ensure_serving_cert(None, None, tmp_path)
    assert stat.S_IMODE(cert.key_file.stat().st_mode) == 0o600
    assert cert.key_file.read_bytes().startswith(b"-----BEGIN PRIVATE KEY")
    cert.cleanup()  # a folder it did not make is kept
    assert cert.key_file.exists()


def test_a_temporary_certificate_folder_is_removed_by_cleanup() -> None:
    cert = ensure_serving_cert(None, None, None)
    assert cert.owned_dir is not None and cert.key_file.exists()
    cert.cleanup()
    assert not cert.owned_dir.exists()


def test_a_rotated_pair_is_served_to_new_handshakes(tmp_path: Path) -> None:
    ca = make_ca("serving-ca")
    cert = write_pair(tmp_path, issue(ca, "first", client=False))
    context = server_context(cert, None)
    reloader = CertReloader(cert, context)
    assert served_subject(context) == "CN=first"
    assert not reloader.check()  # unchanged files: nothing to do
    second = issue(ca, "second", client=False)
    cert.cert_file.write_bytes(second.pem)  # half rotated: the key does not match yet
    assert not reloader.check()
    assert served_subject(context) == "CN=first"  # still the working pair
    cert.key_file.write_bytes(second.key_pem)
    assert reloader.check()
    assert served_subject(context) == "CN=second"
    assert reloader.reloads == 1


def test_a_rotated_pair_loads_without_a_writable_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only root without /tmp: the given pair still reloads (nothing is written)."""
    ca = make_ca("serving-ca")
    cert = write_pair(tmp_path, issue(ca, "first", client=False))
    context = server_context(cert, None)
    reloader = CertReloader(cert, context)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-folder"))
    with pytest.raises(FileNotFoundError):
        tempfile.mkdtemp()  # what a read-only root without /tmp gives
    second = issue(ca, "second", client=False)
    cert.cert_file.write_bytes(second.pem)
    cert.key_file.write_bytes(second.key_pem)
    assert reloader.check()
    assert served_subject(context) == "CN=second"
