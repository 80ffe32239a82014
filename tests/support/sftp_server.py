"""A real SFTP server on 127.0.0.1 for the fsspec checkpoint tests: OpenSSH's sshd.

scripts/install-system-deps.sh installs openssh-server (`make system-deps`). Each server is
the test's own: a throwaway host key and user key, a config that takes only that key, on a
free loopback port, running as the current user (who is the only one it lets in), serving
the filesystem over its built-in SFTP subsystem. Clients reach it as a pod would: an
``sftp://user@127.0.0.1:PORT/dir`` URL and fsspec's variables (`SftpServer.env`).
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.net import free_port
from tests.support.new_pod import stop_server
from tests.support.waiting import wait_for

SSHD = Path("/usr/sbin/sshd")
TRIES = 5
"""Ports tried: another suite may take the chosen one between the check and the bind."""
PRIVSEP = Path("/run/sshd")
"""sshd run as root refuses to start without its (empty) privilege-separation directory,
which the system's boot normally makes."""


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=60,
    )


class SftpServer:
    """One running sshd: where it listens, whom it lets in, with which key."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, workdir: Path) -> None:
        self.proc = proc
        self.port = port
        self.user = getpass.getuser()
        self.key = workdir / "id_ed25519"
        self.host_key = workdir / "host_ed25519"
        self.log = workdir / "sshd.log"

    def url(self, path: Path | str) -> str:
        """The ``sftp://`` URL of `path` (absolute) on this server."""
        return f"sftp://{self.user}@127.0.0.1:{self.port}{path}"

    @property
    def env(self) -> dict[str, str]:
        """What a pod's environment holds to log in: fsspec's option for the sftp protocol."""
        return {"FSSPEC_SFTP_KEY_FILENAME": str(self.key)}

    def client(self) -> Any:
        """A paramiko client logged in with our key that accepts nothing but our host key."""
        import paramiko

        client = paramiko.SSHClient()
        host_key = paramiko.Ed25519Key.from_private_key_file(str(self.host_key))
        client.get_host_keys().add(f"[127.0.0.1]:{self.port}", host_key.get_name(), host_key)
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        client.connect(
            "127.0.0.1",
            port=self.port,
            username=self.user,
            key_filename=str(self.key),
            allow_agent=False,
            look_for_keys=False,
            timeout=10,
        )
        return client

    def stop(self) -> None:
        """Terminates the server (killed if it lingers)."""
        stop_server(self.proc)


def _answers(server: SftpServer) -> bool:
    client = server.client()  # our host key, our user key: our server, not another suite's
    try:
        client.open_sftp().close()
    finally:
        client.close()
    return True


def _start(workdir: Path, attempt: int) -> SftpServer | None:
    """An sshd answering on a free port; None when another suite took the port first."""
    port = free_port()
    config = workdir / f"sshd_config-{attempt}"
    config.write_text(
        "\n".join([
            f"ListenAddress 127.0.0.1:{port}",
            f"HostKey {workdir / 'host_ed25519'}",
            f"AuthorizedKeysFile {workdir / 'authorized_keys'}",
            f"AllowUsers {getpass.getuser()}",
            "PidFile none",
            "UsePAM no",
            "StrictModes no",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "AllowTcpForwarding no",
            "X11Forwarding no",
            "Subsystem sftp internal-sftp",
            "LogLevel VERBOSE",
            "",
        ])
    )  # fmt: skip
    log = workdir / "sshd.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [str(SSHD), "-D", "-e", "-f", str(config)], stdout=out, stderr=subprocess.STDOUT
        )
    server = SftpServer(proc, port, workdir)
    try:
        wait_for(
            lambda: _answers(server),
            timeout_s=60,
            what=f"sshd on 127.0.0.1:{port}",
            interval_s=0.1,
            give_up=lambda: proc.poll() is not None,
            describe=lambda: log.read_text(errors="replace")[-2000:],
        )
    except Exception:
        server.stop()
        tail = log.read_text(errors="replace")[-2000:]
        if "Address already in use" in tail or "Cannot bind any address" in tail:
            return None
        raise
    return server


@contextmanager
def running_sftp_server(workdir: Path) -> Iterator[SftpServer]:
    """An sshd with keys of its own in `workdir`, on a free loopback port, stopped on exit."""
    if not SSHD.is_file() or shutil.which("ssh-keygen") is None:
        raise RuntimeError(f"{SSHD} is missing: make system-deps (openssh-server)")
    if os.geteuid() == 0:
        PRIVSEP.mkdir(mode=0o755, exist_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    _keygen(workdir / "host_ed25519")
    _keygen(workdir / "id_ed25519")
    (workdir / "authorized_keys").write_bytes((workdir / "id_ed25519.pub").read_bytes())
    for attempt in range(TRIES):
        server = _start(workdir, attempt)
        if server is None:
            continue
        try:
            yield server
        finally:
            server.stop()
        return
    raise RuntimeError(f"sshd: every one of {TRIES} ports was taken before it bound it")
