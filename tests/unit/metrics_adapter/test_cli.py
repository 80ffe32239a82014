"""The `edl-adapter serve` contract: option names, env vars, clean errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from metrics_adapter.cli import build_parser, main, settings_from_args
from metrics_adapter.settings import AuthMode

CONTRACT = [
    "--host",
    "--port",
    "--tls-cert-file",
    "--tls-private-key-file",
    "--source",
    "--static-file",
    "--kubeconfig",
    "--pod-selector",
    "--namespace",
    "--prometheus-url",
    "--scrape-interval",
    "--metrics-config",
    "--authentication",
    "--authorization",
]


@pytest.mark.slow
def test_help_documents_every_option_and_env_var() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "metrics_adapter.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    for flag in CONTRACT:
        assert flag in out
    assert "EDL_ADAPTER_SCRAPE_INTERVAL" in out
    assert "ONLY for local demos/tests" in out


def test_contract_command_line_parses() -> None:
    args = build_parser().parse_args(
        [
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "8443",
            "--source",
            "kubernetes",
            "--kubeconfig",
            "k",
            "--pod-selector",
            "app=trainer",
            "--namespace",
            "ml",
            "--scrape-interval",
            "1s",
            "--metrics-config",
            "c.yaml",
            "--authentication",
            "none",
            "--authorization",
            "delegated",
            "--requestheader-allowed-names",
            "front-proxy-client,aggregator",
        ]
    )
    s = settings_from_args(args)
    assert (s.host, s.port, s.source, s.namespace, s.scrape_interval) == (
        "127.0.0.1",
        8443,
        "kubernetes",
        "ml",
        1.0,
    )
    assert s.kubeconfig == Path("k")
    assert (s.authentication, s.authorization) == (AuthMode.NONE, AuthMode.DELEGATED)
    assert s.requestheader_allowed_names == ["front-proxy-client", "aggregator"]
    assert s.tls


def test_env_vars_set_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDL_ADAPTER_SCRAPE_INTERVAL", "250ms")
    monkeypatch.setenv("EDL_ADAPTER_PORT", "9999")
    monkeypatch.setenv("EDL_ADAPTER_NO_TLS", "true")
    s = settings_from_args(build_parser().parse_args(["serve"]))
    assert (s.scrape_interval, s.port, s.tls) == (0.25, 9999, False)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scrape-interval", "fast"], "invalid duration"),
        (["--source", "static"], "needs --static-file"),
        (["--source", "prometheus"], "needs --prometheus-url"),
        (["--source", "kubernetes", "--kubeconfig", "/nonexistent"], "needs a cluster"),
        (["--source", "static", "--static-file", "/nonexistent.yaml"], "cannot load"),
        (["--metrics-config", "/nonexistent.yaml"], "cannot read"),
        (
            [
                "--source",
                "prometheus",
                "--prometheus-url",
                "http://127.0.0.1:1",
                "--tls-cert-file",
                "x",
            ],
            "go together",
        ),
    ],
)
def test_bad_options_exit_2_with_a_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["serve", "--authentication", "none", "--authorization", "none", *argv])
    assert code == 2
    assert message in capsys.readouterr().err


def test_delegated_authorization_without_a_cluster_explains_the_off_switch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    pods = tmp_path / "pods.yaml"
    pods.write_text("pods: []\n")
    assert main(["serve", "--static-file", str(pods)]) == 2
    assert "--authentication none --authorization none" in capsys.readouterr().err


def test_a_read_only_root_without_a_writable_tmp_says_what_it_needs_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `readOnlyRootFilesystem: true` without a /tmp emptyDir does to the self-signed pair."""
    import errno
    import tempfile

    def read_only(*args: object, **kwargs: object) -> str:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    pods = tmp_path / "pods.yaml"
    pods.write_text("pods: []\n")
    argv = ["serve", "--static-file", str(pods), "--authentication", "none",
            "--authorization", "none", "--port", "0"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]  # after the auth-none warnings
    assert "Traceback" not in err and line == (
        "edl-adapter: error: cannot write the self-signed serving certificate to a temporary "
        "folder (TMPDIR, /tmp): Read-only file system; mount a writable --cert-dir (an "
        "emptyDir) or pass --tls-cert-file and --tls-private-key-file"
    )
