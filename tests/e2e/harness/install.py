"""Installing EDL as a user does: a kustomization of our own over `manifests/...` that sets the
image names (kustomize `images:`), applied with `kubectl apply -k`; then bounded waits that
show a pod's own error (ErrImagePull, CreateContainerConfigError, ...) instead of hanging."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from tests.e2e.harness.processes import HarnessError
from tests.support.waiting import wait_for

REPO_ROOT = Path(__file__).resolve().parents[3]
BUILD_IMAGES = REPO_ROOT / "scripts" / "build-images.sh"
FAILING_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "CrashLoopBackOff",
    }
)


class PodStartFailed(AssertionError):
    """A pod of the rollout reports a container that cannot start; the message is its error."""


@contextlib.contextmanager
def images_lock() -> Iterator[None]:
    """Held while `make images` runs from a test session: no other session's build is half
    done (with its stage images untagged for a moment) while it is held."""
    cache = Path(os.environ.get("EDL_CACHE_DIR", Path.home() / ".cache" / "edl"))
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / "images.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure_images(
    timeout_s: float = 3600.0, *, names: tuple[str, ...] | None = None
) -> dict[str, str]:
    """`make images` with podman (instant when the images are up to date): name -> reference.

    `names`: only these images (`EDL_IMAGES`, e.g. `("trainer",)`); None: the default set.

    Raises:
        HarnessError: the build failed; the message holds its last output lines.
    """
    with images_lock():
        try:
            done = subprocess.run(
                ["bash", str(BUILD_IMAGES)],
                env={
                    **os.environ,
                    "EDL_IMAGE_BUILDER": "podman",
                    "EDL_NEED_RUNC": "1",
                    **({"EDL_IMAGES": " ".join(names)} if names else {}),
                },
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            raise HarnessError(f"make images ran past {timeout_s:.0f} s") from e
    if done.returncode != 0:
        out = "\n".join((done.stdout + done.stderr).splitlines()[-40:])
        raise HarnessError(f"make images failed (rc={done.returncode}):\n{out}")
    return dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)


def write_overlay(
    directory: Path,
    base: str,
    *,
    images: list[dict[str, str]],
    patches: list[dict[str, Any]] | None = None,
    namespace: str | None = None,
) -> Path:
    """A kustomization in `directory` over `base` (a path below the repository root)."""
    directory.mkdir(parents=True, exist_ok=True)
    kustomization: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(REPO_ROOT / base, directory)],
        "images": images,
    }
    if patches:
        kustomization["patches"] = list(patches)
    if namespace:
        kustomization["namespace"] = namespace
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return directory


def json_patch(kind: str, name: str, *ops: dict[str, Any]) -> dict[str, Any]:
    """A kustomize `patches:` entry: JSON-patch operations on one object."""
    return {"target": {"kind": kind, "name": name}, "patch": yaml.safe_dump(list(ops))}


def pod_errors(core: client.CoreV1Api, namespace: str, selector: str) -> list[str]:
    """`pod: reason: message` for every container that reports it cannot start."""
    out = []
    for pod in core.list_namespaced_pod(namespace, label_selector=selector).items:
        for cs in pod.status.container_statuses or []:
            waiting = cs.state.waiting if cs.state else None
            if waiting is not None and waiting.reason in FAILING_REASONS:
                out.append(f"{pod.metadata.name}: {waiting.reason}: {waiting.message}")
    return out


def wait_rollout(api: client.ApiClient, namespace: str, name: str, timeout_s: float) -> None:
    """Waits until every replica of Deployment `name` is ready.

    Raises:
        PodStartFailed: at once, when one of its pods reports a container that cannot start.
        WaitTimeout: the rollout did not finish in time.
    """
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)

    def selector() -> str:
        d = apps.read_namespaced_deployment(name, namespace)
        return ",".join(f"{k}={v}" for k, v in d.spec.selector.match_labels.items())

    def done() -> bool:
        d = apps.read_namespaced_deployment(name, namespace)
        errors = pod_errors(core, namespace, selector())
        if errors:
            raise PodStartFailed(f"deployment {namespace}/{name}: " + "; ".join(errors))
        want = d.spec.replicas or 0
        return (d.status.ready_replicas or 0) >= want and (d.status.updated_replicas or 0) >= want

    wait_for(
        done,
        timeout_s=timeout_s,
        what=f"deployment {namespace}/{name} rolled out",
        abort_on=(PodStartFailed,),
    )
