"""`helm` for the chart tests: built from the Go module proxy by scripts/build-helm.sh (cached
by version), then `helm template` / `helm lint` of charts/edl and charts/edl-trainer."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.support.cached_scripts import ScriptFailed, cached_path

ROOT = Path(__file__).resolve().parents[2]
CHARTS = ROOT / "charts"
KUBE_VERSION = "1.35.4"
"""What `helm template` renders for: the e2e control plane's version (tests/e2e/controlplane)."""


class HelmFailed(AssertionError):
    """helm exited non-zero; the message is its stderr."""


@functools.cache
def helm_binary() -> Path:
    """The cached helm (builds it on first use: minutes on a cold machine)."""
    try:
        return cached_path("build-helm.sh", timeout_s=1800)
    except ScriptFailed as e:
        raise HelmFailed(str(e)) from e


def helm(*args: str, env: dict[str, str] | None = None, timeout_s: float = 120) -> str:
    """Runs helm; its stdout.

    Raises:
        HelmFailed: a non-zero exit (the message holds stderr).
    """
    done = subprocess.run(
        [str(helm_binary()), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env=env,
    )
    if done.returncode != 0:
        raise HelmFailed(f"helm {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def examples(chart: str) -> list[Path]:
    """The tested values files of a chart (charts/<chart>/examples/*.yaml)."""
    return sorted((CHARTS / chart / "examples").glob("*.yaml"))


def template(
    chart: str,
    values: Path | None = None,
    namespace: str = "edl-system",
    release: str = "edl",
    sets: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """The documents `helm template` renders (no cluster: `lookup` finds nothing)."""
    args = ["template", release, str(CHARTS / chart), "--namespace", namespace,
            "--kube-version", KUBE_VERSION]  # fmt: skip
    if values is not None:
        args += ["-f", str(values)]
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(helm(*args)) if d]
