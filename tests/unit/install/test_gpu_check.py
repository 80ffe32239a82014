"""The GPU check and the PyTorch GPU image, as far as a machine without a GPU can check them.

bench/gpu_check.sh runs only where an NVIDIA GPU is (no machine here has one): it must parse,
pass shellcheck, print its plan on ``--dry-run``, and say in one line that nothing was checked
where there is no GPU. The image script knows the ``trainer-torch-gpu`` image, built from the
PyTorch target with the GPU extra and the whole torch install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "bench" / "gpu_check.sh"


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args],
        cwd=ROOT,
        env={**os.environ, "EDL_GPU_PYTHON": sys.executable, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_the_script_parses_and_passes_shellcheck() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)], check=False).returncode == 0
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed")
    done = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout


@pytest.mark.slow
def test_a_dry_run_prints_what_it_would_install_and_check() -> None:
    done = run("--dry-run")
    assert done.returncode == 0, done.stderr
    assert "pip install -e '.[torch,gpu]'" in done.stdout
    assert "examples.train_digits_ddp_elastic --device cuda" in done.stdout
    assert "NCCL first (it may refuse two ranks on one device), else gloo" in done.stdout


@pytest.mark.slow
def test_without_a_gpu_it_says_so_and_checks_nothing(tmp_path: Path) -> None:
    if shutil.which("nvidia-smi") is not None:
        pytest.skip("this machine has nvidia-smi: the real check would run")
    done = run(EDL_GPU_VENV=str(tmp_path / "venv"))
    assert done.returncode == 2
    assert "gpu_check: no NVIDIA GPU here" in done.stderr
    assert not (tmp_path / "venv").exists()  # nothing installed


def test_the_pytorch_gpu_image_is_the_torch_target_with_the_gpu_extra() -> None:
    script = (ROOT / "scripts" / "build-images.sh").read_text()
    line = next(x for x in script.splitlines() if x.strip().startswith("trainer-torch-gpu)"))
    assert "build trainer-torch-gpu trainer-torch" in line and ":$VERSION-gpu" in line
    assert '"TORCH_EXTRAS=torch gpu s3"' in script  # s3: checkpoints on object storage
    assert "images/torch-site.py --gpu" in script
    containerfile = (ROOT / "images" / "Containerfile").read_text()
    stage = containerfile.split("FROM deps AS torch-deps", 1)[1].split("\nFROM ", 1)[0]
    assert 'ARG TORCH_EXTRAS="torch s3"' in stage and "${TORCH_EXTRAS}" in stage


@pytest.mark.slow
def test_the_gpu_torch_tree_links_the_whole_install(tmp_path: Path) -> None:
    site = tmp_path / "site"
    for name in ("torch/__init__.py", "nvidia/nccl/lib/libnccl.so.2", "triton/__init__.py"):
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text("x")
    (site / ".complete").write_text("")
    dest = tmp_path / "gpu-site"
    done = subprocess.run(
        [sys.executable, str(ROOT / "images" / "torch-site.py"), "--gpu", str(site), str(dest)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    linked = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert linked == ["nvidia/nccl/lib/libnccl.so.2", "torch/__init__.py", "triton/__init__.py"]
    assert (dest / "torch/__init__.py").stat().st_ino == (site / "torch/__init__.py").stat().st_ino
