"""The wheel as a user installs it: into an empty venv, with no extra, then with ``[adapter]``.

What a training image gets from ``pip install edl-k8s``: the agent and the trainer library, and
none of the adapter's server libraries; ``edl-adapter`` there is one line naming the extra, and
so is an ``s3://`` checkpoint URL (the AWS SDK is the ``[s3]`` extra) and an ``sftp://`` one
(fsspec is the ``[fsspec]`` extra).
The wheel is built from this tree (``python -m build``, isolated); its dependencies come from
pip's cache and the configured index, as for a user.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

import pytest

from metrics_adapter.entry import ADAPTER_MODULES

ROOT = Path(__file__).resolve().parents[3]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]


def run(args: Sequence[str | Path], timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        cwd="/",  # not the source tree: its packages would shadow the installed ones
        env=env,
    )


def ok(args: Sequence[str | Path], timeout_s: float = 600) -> str:
    done = run(args, timeout_s)
    assert done.returncode == 0, f"{' '.join(map(str, args))}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    ok([sys.executable, "-m", "build", "--wheel", "--outdir", out, ROOT])
    (built,) = out.glob("*.whl")
    assert built.name == f"edl_k8s-{VERSION}-py3-none-any.whl"
    return built


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    env = tmp_path_factory.mktemp("venv") / "venv"
    ok([sys.executable, "-m", "venv", env])
    ok([env / "bin/python", "-m", "pip", "install", "-q", wheel])
    return env


def test_the_base_install_runs_the_agent_and_the_trainer_library(venv: Path) -> None:
    assert ok([venv / "bin/edl-agent", "--version"]) == f"edl-agent {VERSION}\n"
    assert "run" in ok([venv / "bin/edl-agent", "--help"])
    assert "edl-agent run" in ok([venv / "bin/edl-agent", "run", "--help"])
    ok([venv / "bin/python", "-c", "from agent.trainer.elastic import ElasticTrainer"])
    assert ok([venv / "bin/edl-sim", "--version"]) == f"edl-sim {VERSION}\n"


def test_the_base_install_has_none_of_the_adapters_libraries(venv: Path) -> None:
    script = (
        "import importlib.util, sys\n"
        "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m)))"
    )
    assert ok([venv / "bin/python", "-c", script, *sorted(ADAPTER_MODULES)]).strip() == ""


def test_s3_checkpoints_without_their_extra_name_the_extra_in_one_line(
    venv: Path, tmp_path: Path
) -> None:
    assert run([venv / "bin/python", "-c", "import boto3"]).returncode == 1
    agent: list[str | Path] = [venv / "bin/edl-agent", "run", "--elastic", "--job", "j"]
    url = ["--checkpoint-url", "s3://ckpt/jobs"]
    done = run([*agent, "--membership", f"local:{tmp_path}", *url, "--", "true"])
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("edl-agent: error: --checkpoint-url")
    assert "pip install 'edl-k8s[s3]'" in line


def test_fsspec_checkpoints_without_their_extra_name_the_extra_in_one_line(
    venv: Path, tmp_path: Path
) -> None:
    assert run([venv / "bin/python", "-c", "import fsspec"]).returncode == 1
    agent: list[str | Path] = [venv / "bin/edl-agent", "run", "--elastic", "--job", "j"]
    url = ["--checkpoint-url", "sftp://edl@files.example/ckpt"]
    done = run([*agent, "--membership", f"local:{tmp_path}", *url, "--", "true"])
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("edl-agent: error: --checkpoint-url")
    assert "sftp:// checkpoints need fsspec: pip install 'edl-k8s[fsspec]'" in line


def test_the_adapter_without_its_extra_names_the_extra_in_one_line(venv: Path) -> None:
    done = run([venv / "bin/edl-adapter", "--help"])
    assert done.returncode == 1
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("edl-adapter: error: ")
    assert "pip install 'edl-k8s[adapter]'" in line


def test_every_package_is_typed_and_the_metadata_names_the_project(venv: Path) -> None:
    script = (
        "import importlib.metadata as m, importlib.util, json, pathlib\n"
        "d = m.distribution('edl-k8s')\n"
        "packages = sorted(set(d.read_text('top_level.txt').split()))\n"
        "print(json.dumps({'license': d.metadata['License-Expression'],\n"
        "  'extras': d.metadata.get_all('Provides-Extra'), 'packages': packages,\n"
        "  'typed': [p for p in packages if (pathlib.Path(\n"
        "    importlib.util.find_spec(p).origin).parent / 'py.typed').is_file()]}))\n"
    )
    meta = json.loads(ok([venv / "bin/python", "-c", script]))
    assert meta["license"] == "Apache-2.0"
    assert {"adapter", "sim", "paddle", "torch", "gpu", "s3", "fsspec"} <= set(meta["extras"])
    assert meta["packages"] == ["agent", "edl_common", "edl_sim", "edl_sizing", "metrics_adapter"]
    assert meta["typed"] == meta["packages"]


def test_the_adapter_extra_is_what_the_adapter_needs(venv: Path, wheel: Path) -> None:
    # Last in the module: it adds the extra to the shared venv the tests above read.
    ok([venv / "bin/python", "-m", "pip", "install", "-q", f"{wheel}[adapter]"])
    assert ok([venv / "bin/edl-adapter", "--version"]) == f"edl-adapter {VERSION}\n"
    assert "preflight" in ok([venv / "bin/edl-adapter", "--help"])
    ok([venv / "bin/python", "-c", "import metrics_adapter.assembly, metrics_adapter.preflight"])
