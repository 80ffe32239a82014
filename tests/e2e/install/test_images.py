"""What `make images` builds, run as a user would run it: `podman run`, no cluster.

The adapter image is small and has no shell; `make images` leaves no untagged image of ours
behind, and no image carries a console script of a package it does not install; under a
read-only root without a writable /tmp
the adapter and the agent say in one line what they need, and run when they get it; the
PyTorch CPU trainer image trains the torch example as an elastic job of one under
`edl-agent` (read-only root; the agent's folders and torch's TMPDIR on one volume).
Containers use podman with runc and the host network (tests/e2e/harness/containers.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest
import requests

from tests.e2e.harness.containers import containers_conf
from tests.e2e.harness.install import images_lock
from tests.support.net import free_port
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]

ADAPTER_TARGET_BYTES = 120_000_000
"""The issue's target for the adapter image (prometheus-adapter's is about 70 MB)."""


@pytest.fixture(scope="module")
def podman_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    conf.write_text(containers_conf("runc"))
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


def podman(
    env: dict[str, str], *args: str, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *args], env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )


def run_once(
    env: dict[str, str], *args: str, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    """`podman run --rm ARGS` under a name of its own, removed even when the client times out
    (killing `podman run` does not stop its container)."""
    name = f"edl-test-{uuid.uuid4().hex[:12]}"
    try:
        return podman(env, *READ_ONLY, "--name", name, *args, timeout_s=timeout_s)
    finally:
        podman(env, "rm", "--force", "--time", "0", "--ignore", name)


def shared_folder(path: Path) -> Path:
    """A host folder the images' user (uid 65532) can write."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o777)
    return path


READ_ONLY = ("run", "--rm", "--network", "host", "--pull", "never", "--read-only",
             "--read-only-tmpfs=false")  # fmt: skip
"""A read-only root and no tmpfs of podman's own: /tmp is not writable."""


def test_the_adapter_image_is_small_and_has_no_shell(
    edl_images: dict[str, str], podman_env: dict[str, str]
) -> None:
    image = edl_images["adapter"]
    size = int(podman(podman_env, "image", "inspect", "--format", "{{.Size}}", image).stdout)
    print(f"\nadapter image {image}: {size / 1e6:.1f} MB")
    assert size <= ADAPTER_TARGET_BYTES
    for tool in ("/bin/sh", "/usr/bin/apt-get", "/usr/bin/pip"):
        done = podman(podman_env, "run", "--rm", "--pull", "never", "--entrypoint", tool, image)
        assert done.returncode != 0 and "no such file or directory" in done.stderr, tool
    version = podman(podman_env, "run", "--rm", "--pull", "never", image, "--version")
    assert version.returncode == 0 and version.stdout.startswith("edl-adapter ")


def test_make_images_leaves_no_untagged_image_of_ours(
    edl_images: dict[str, str], podman_env: dict[str, str]
) -> None:
    """Every image made from images/Containerfile (label edl.stage on its stages, edl.build-key
    on the final images) is tagged: the stages as localhost/edl-build:* (the next build's
    cache); a stage image a build replaced is gone, not left as <none>."""
    with images_lock():  # no build of another session half done meanwhile
        for label in ("edl.stage", "edl.build-key"):
            listed = podman(podman_env, "images", "--filter", f"label={label}",
                            "--format", "{{.ID}} {{.Repository}}:{{.Tag}}")  # fmt: skip
            assert listed.returncode == 0, listed.stderr
            rows = listed.stdout.splitlines()
            assert rows, f"no image with the label {label}: the check would see nothing"
            assert [r for r in rows if "<none>" in r] == [], rows
            dangling = podman(podman_env, "images", "-q", "--filter", "dangling=true",
                              "--filter", f"label={label}")  # fmt: skip
            assert dangling.returncode == 0 and dangling.stdout.split() == [], dangling
    stages = podman(podman_env, "images", "--filter", "label=edl.stage",
                    "--format", "{{.Repository}}")  # fmt: skip
    assert any(r.endswith("/edl-build") for r in stages.stdout.split()), stages.stdout


def test_the_images_carry_no_console_script_of_the_offline_tools(
    edl_images: dict[str, str], podman_env: dict[str, str]
) -> None:
    """edl_sim is not installed in the images, so neither is edl-hpa nor edl-sim (they could
    only fail with ModuleNotFoundError); each image's own command is there and runs."""
    own = {"adapter": "edl-adapter", "trainer": "edl-agent", "trainer-torch": "edl-agent"}
    for name, command in own.items():
        image = edl_images[name]
        for absent in ("edl-sim", "edl-hpa"):
            done = podman(podman_env, "run", "--rm", "--pull", "never",
                          "--entrypoint", f"/opt/edl/bin/{absent}", image)  # fmt: skip
            assert done.returncode != 0, (name, absent, done.stdout)
            assert "no such file or directory" in done.stderr.lower(), (name, absent, done.stderr)
        version = podman(podman_env, "run", "--rm", "--pull", "never",
                         "--entrypoint", f"/opt/edl/bin/{command}", image, "--version")  # fmt: skip
        assert version.returncode == 0 and version.stdout.startswith(f"{command} "), version
    python = ["--entrypoint", "/opt/edl/bin/python", edl_images["adapter"]]
    no_sim = podman(podman_env, "run", "--rm", "--pull", "never", *python, "-c", "import edl_sim")
    assert no_sim.returncode == 1 and "ModuleNotFoundError" in no_sim.stderr, no_sim


def test_the_trainer_images_carry_the_agent_without_the_adapters_libraries(
    edl_images: dict[str, str], podman_env: dict[str, str]
) -> None:
    """A trainer image has what `pip install edl-k8s` installs (the agent, the trainer library)
    and its framework, not the adapter's server libraries; the adapter image has them."""
    libraries = ("flask", "cryptography", "cachetools", "msgspec")
    found = "import importlib.util as u; print(*[m for m in {!r} if u.find_spec(m)])"
    agent = "import agent.trainer, agent.process.cli; "
    for name in ("trainer", "trainer-torch", "adapter"):
        code = found.format(libraries) if name == "adapter" else agent + found.format(libraries)
        done = podman(podman_env, "run", "--rm", "--pull", "never", "--entrypoint",
                      "/opt/edl/bin/python", edl_images[name], "-c", code)  # fmt: skip
        assert done.returncode == 0, (name, done.stderr)
        expected = list(libraries) if name == "adapter" else []
        assert done.stdout.split() == expected, (name, done.stdout)


def test_without_a_writable_tmp_the_adapter_says_what_it_needs_and_runs_with_it(
    edl_images: dict[str, str], podman_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "pods.yaml").write_text("pods: []\n")
    (tmp_path / "pods.yaml").chmod(0o644)
    port = free_port()
    pods = tmp_path / "pods.yaml"
    serve = ["-v", f"{pods}:/etc/edl/pods.yaml:ro", edl_images["adapter"], "serve",
             "--host", "127.0.0.1", "--port", str(port), "--static-file", "/etc/edl/pods.yaml",
             "--authentication", "none", "--authorization", "none"]  # fmt: skip
    done = run_once(podman_env, *serve)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith("edl-adapter: error: cannot write the self-signed serving certificate")
    assert "mount a writable --cert-dir" in last

    certs = shared_folder(tmp_path / "certs")
    name = f"edl-test-adapter-{port}"
    mount = ["-v", f"{certs}:/var/run/certs"]
    started = podman(podman_env, *READ_ONLY, "-d", "--name", name, *mount, *serve,
                     "--cert-dir", "/var/run/certs")  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:

        def healthy() -> bool:
            try:
                r = requests.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=2)
            except requests.RequestException:
                return False
            return r.status_code == 200

        wait_for(healthy, timeout_s=60, what="the adapter's /healthz with --cert-dir mounted",
                 describe=lambda: podman(podman_env, "logs", name).stderr)  # fmt: skip
        assert sorted(p.name for p in certs.iterdir()) == ["apiserver.crt", "apiserver.key"]
    finally:
        podman(podman_env, "rm", "--force", "--time", "0", name)


def test_without_a_writable_tmp_the_agent_says_what_it_needs(
    edl_images: dict[str, str], podman_env: dict[str, str]
) -> None:
    for image in (edl_images["trainer"], edl_images["trainer-torch"]):
        done = run_once(podman_env, image, "run", "--port", str(free_port()),
                        "--", "python", "-c", "pass")  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        (line,) = done.stderr.splitlines()
        assert line.startswith("edl-agent: error: cannot create the metrics folder"), line
        assert line.endswith("mount a writable /tmp (an emptyDir) or set --metrics-dir "
                             "(EDL_AGENT_METRICS_DIR)")  # fmt: skip


def test_the_torch_image_trains_the_torch_example_as_an_elastic_job(
    edl_images: dict[str, str], podman_env: dict[str, str], tmp_path: Path
) -> None:
    work = shared_folder(tmp_path / "work")
    shared_folder(work / "tmp")  # torch itself needs a temporary folder (TMPDIR)
    done = run_once(
        podman_env, "-v", f"{work}:/work", "-e", "EDL_ELASTIC_DIR=/work/state",
        "-e", "TMPDIR=/work/tmp",
        edl_images["trainer-torch"], "run", "--port", str(free_port()),
        "--metrics-dir", "/work/metrics", "--elastic", "--job", "digits-torch",
        "--membership", "local:/work/members", "--min", "1", "--max", "1",
        "--on-finished", "exit", "--",
        "python", "-m", "examples.train_digits_torch_elastic", "--epochs", "2",
        "--result", "/work/result.json",
        timeout_s=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads((work / "result.json").read_text())
    assert figures["world_size"] == 1 and figures["global_step"] > 0
    assert figures["accuracy"] > 0.5  # ten classes: chance is 0.1
    assert '"world_size": 1' in done.stdout  # the torch script's own last line
