"""`edl-agent` under a read-only root without a writable /tmp: one line saying what it needs.

As root every folder here is writable, so "no temporary folder" is what `tempfile` answers
when its folder does not exist (what a read-only root without /tmp gives it). The container
check (`podman run --read-only`) is in tests/e2e/install/test_images.py.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from agent.process.cli import main


@pytest.fixture
def no_temporary_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "read-only-root" / "tmp"))


@pytest.mark.usefixtures("no_temporary_folder")
def test_the_metrics_folder_names_the_option_that_replaces_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "--port", "0", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("edl-agent: error: cannot create the metrics folder in a temporary")
    assert "mount a writable /tmp (an emptyDir) or set --metrics-dir" in err


@pytest.mark.usefixtures("no_temporary_folder")
def test_the_elastic_state_folder_names_its_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    members = f"local:{tmp_path / 'members'}"
    argv = ["run", "--port", "0", "--metrics-dir", str(tmp_path / "metrics"), "--elastic",
            "--job", "d", "--membership", members, "--", "true"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "cannot create the member's state folder" in err and "EDL_ELASTIC_DIR" in err


@pytest.mark.slow
@pytest.mark.usefixtures("no_temporary_folder")
def test_with_a_metrics_folder_given_no_temporary_folder_is_needed(tmp_path: Path) -> None:
    assert main(["run", "--port", "0", "--metrics-dir", str(tmp_path / "m"), "--", "true"]) == 0
