"""Elastic digits training on the real control plane, rescaled by `kubectl scale`: 1 -> 3 -> 2 -> 1.

Every pod of the trainer Deployment runs `edl-agent run --elastic --membership kubernetes`
around the elastic digits example of one framework (Paddle's `examples.train_digits_elastic`,
PyTorch's `examples.train_digits_torch_elastic`); the agents agree on a world through Leases and the
`edl-digits-world` ConfigMap, reaching kube-apiserver as ServiceAccount `edl-trainer` (a
token kubeconfig, RBAC as in docs/elastic.md). The test scales the Deployment with `kubectl`,
the ReplicaSet creates and deletes pods, the pod runner starts and SIGTERMs their processes,
and after each step the test waits (bounded) for a new generation of the expected size to
train. Then, as in tests/integration/test_elastic_digits.py: the sample ledger shows every
sample of every epoch exactly once in the final lineage, the restored global step never went
back, and the accuracy is within 1 point of a one-process run of the same seed. Once the job
is done, the agents stay up idle (the default `--on-finished idle`: a Deployment restarts a
container that exits, even with 0), the world record says finished, and a pod added after the
end neither trains nor fails.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from kubernetes import client

from agent.protocol.control import Timings
from agent.trainer.ledger import verify
from tests.e2e.conftest import E2ENamespace, Kubectl
from tests.e2e.harness.controlplane import ControlPlane
from tests.e2e.harness.workloads import METRICS_PORT, create_trainer_job
from tests.support.digits_job import NUM_TRAIN, SCRIPTS, reference_accuracy
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(300)

JOB = "digits"
EPOCHS = 10
GLOBAL_BATCH = 64
STEPS_PER_EPOCH = -(-NUM_TRAIN // GLOBAL_BATCH)
TRAIN_ARGS = ["--epochs", str(EPOCHS), "--global-batch", str(GLOBAL_BATCH), "--seed", "3"]
STEP_SLEEP = 0.25
"""Simulated compute per step, so the job's 230 steps outlast the three rescales (each costs
the debounce and a joiner's warm-up in steps of the old world)."""
SERVICE_ACCOUNT = "edl-trainer"
AGENT_RULES = [
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "list", "create", "update", "patch", "delete"],
    },
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "update"]},
]
"""What docs/elastic.md says the agents need, and nothing more."""


def grant_agent_access(
    ns: str, api: client.ApiClient, kubectl: Kubectl, cp: ControlPlane, path: Path
) -> Path:
    """ServiceAccount + Role + RoleBinding; writes a kubeconfig holding the SA's token."""
    assert cp.pki is not None
    client.CoreV1Api(api).create_namespaced_service_account(
        ns, {"metadata": {"name": SERVICE_ACCOUNT}}
    )
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(ns, {"metadata": {"name": "edl-agent"}, "rules": AGENT_RULES})
    rbac.create_namespaced_role_binding(
        ns,
        {
            "metadata": {"name": "edl-agent"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "edl-agent",
            },
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": ns}],
        },
    )
    token = kubectl("create", "token", SERVICE_ACCOUNT, "-n", ns, "--duration=1h").strip()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "e2e",
                "cluster": {"server": cp.server, "certificate-authority": str(cp.pki.ca.cert)},
            }
        ],
        "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
        "contexts": [
            {
                "name": "e2e",
                "context": {"cluster": "e2e", "user": SERVICE_ACCOUNT, "namespace": ns},
            }
        ],
        "current-context": "e2e",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def elastic_container(
    tmp: Path, kubeconfig: Path, reinit: str, script: str, train_args: list[str] | None = None
) -> dict[str, Any]:
    """`edl-agent run --elastic --membership kubernetes` around a digits elastic example.

    The agent is the container command itself: once the job is finished it idles (ready, no
    trainer) until the pod is deleted, so the Deployment never restarts the finished job.
    """
    command = [
        "edl-agent", "run", "--host=$(POD_IP)", f"--port={METRICS_PORT}", "--elastic",
        "--job", JOB, "--membership", "kubernetes", "--min", "1", "--max", "4", "--",
        "python", "-m", script,
        *(train_args or [*TRAIN_ARGS, "--step-sleep", str(STEP_SLEEP)]),
        "--result", str(tmp / "result.json"),
    ]  # fmt: skip

    def field_env(name: str, path: str) -> dict[str, Any]:
        return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}

    env = [
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_IP", "status.podIP"),
        field_env("EDL_NAMESPACE", "metadata.namespace"),
        {"name": "KUBECONFIG", "value": str(kubeconfig)},
        {"name": "EDL_ELASTIC_DIR", "value": f"{tmp}/members/$(POD_NAME)"},
        {"name": "EDL_SAMPLE_LEDGER", "value": str(tmp / "ledger")},
        # Two pods of one `kubectl scale` warm up seconds apart on a loaded 2-core box (seen:
        # > 2 s); the debounce must cover that spread for one scale to be one generation.
        {"name": "EDL_DEBOUNCE", "value": "4"},
        {"name": "EDL_MAX_DEBOUNCE", "value": "12"},
        {"name": "EDL_MEMBER_TTL", "value": "10"},
        {"name": "EDL_POLL_INTERVAL", "value": "0.3"},
        {"name": "EDL_DRAIN_TIMEOUT", "value": "30"},
        {"name": "EDL_INIT_TIMEOUT", "value": "90"},
        {"name": "EDL_REINIT", "value": reinit},
    ]
    return {
        "name": "trainer",
        "image": "edl-e2e.invalid/edl-agent:local",
        "command": command,
        "env": env,
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": METRICS_PORT}},
    }


@dataclass
class WorldWatch:
    """The job's world record (ConfigMap `edl-<job>-world`) and the agents' metrics."""

    core: client.CoreV1Api
    namespace: str
    ledger: Path
    sizes: list[int] = field(default_factory=list)
    history: list[tuple[float, int, int]] = field(default_factory=list)
    """(seconds since start, generation, size) of every generation seen."""
    started: float = field(default_factory=time.monotonic)

    def record(self) -> dict[str, Any]:
        """The world record as stored ({} before there is one)."""
        try:
            cm = self.core.read_namespaced_config_map(f"edl-{JOB}-world", self.namespace)
        except client.ApiException as e:
            if e.status == 404:
                return {}
            raise
        raw: dict[str, Any] = json.loads((cm.data or {}).get("world") or "{}")
        return raw

    def world(self) -> tuple[int, int]:
        """(generation, number of members) of the current record; (0, 0) before there is one."""
        raw = self.record()
        gen, size = int(raw.get("generation", 0)), len(raw.get("members") or [])
        if not self.history or self.history[-1][1] != gen:
            self.history.append((round(time.monotonic() - self.started, 1), gen, size))
            if size and (not self.sizes or self.sizes[-1] != size):
                self.sizes.append(size)
        return gen, size

    def steps_in(self, generation: int) -> int:
        """Global steps rank 0 of `generation` has started (from the ledger)."""
        steps: set[int] = set()
        for path in self.ledger.glob(f"ledger-*-g{generation}-r0-*.jsonl"):
            for line in path.read_text().splitlines():
                if '"s":' in line:
                    steps.add(int(json.loads(line)["s"]))
        return len(steps)

    def training_at(self, size: int, after: int, steps: int) -> int | None:
        """The generation (> `after`) of `size` members once it trained `steps` steps."""
        gen, n = self.world()
        if gen > after and n == size and self.steps_in(gen) >= steps:
            return gen
        return None

    def global_step(self) -> int:
        best = -1
        for path in self.ledger.glob("ledger-*.jsonl"):
            for line in path.read_text().splitlines():
                if '"s":' in line:
                    best = max(best, int(json.loads(line)["s"]))
        return best


def metrics(ip: str) -> dict[str, float]:
    """The agent's unlabelled samples, name -> value (`edl_trainer_*` only)."""
    url = f"http://{ip}:{METRICS_PORT}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.fullmatch(r"(edl_trainer_[a-z_]+) ([0-9.e+-]+)", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


@pytest.mark.parametrize(
    ("framework", "reinit"), [("paddle", "auto"), ("paddle", "process"), ("torch", "auto")]
)
def test_kubectl_scale_1_3_2_1_trains_every_sample_once(
    e2e_ns: E2ENamespace,
    kubectl: Kubectl,
    control_plane: ControlPlane,
    tmp_path: Path,
    framework: str,
    reinit: str,
) -> None:
    """`auto`: survivors re-initialise in-process where the framework allows; `process`:
    restarts (PyTorch's restart path is covered by tests/integration/test_elastic_digits.py)."""
    ns = e2e_ns.name
    kubeconfig = grant_agent_access(
        ns, e2e_ns.api, kubectl, control_plane, tmp_path / "agent.kubeconfig"
    )
    create_trainer_job(
        e2e_ns.api,
        ns,
        e2e_ns.load_dir,
        replicas=1,
        container=elastic_container(tmp_path, kubeconfig, reinit, SCRIPTS[framework]),
        service_account=SERVICE_ACCOUNT,
    )
    watch = WorldWatch(client.CoreV1Api(e2e_ns.api), ns, tmp_path / "ledger")
    logs = e2e_ns.runner.log_tails
    pause_seen: dict[str, tuple[float, float]] = {}  # pod IP -> (count, sum) of its pauses
    steps: list[str] = []

    def scale(replicas: int) -> None:
        kubectl("-n", ns, "scale", "deployment/trainer", f"--replicas={replicas}")

    def agents_agree(size: int, gen: int) -> dict[str, dict[str, float]] | None:
        """Every running pod's agent exports this world (the metrics the HPA side reads), and
        a survivor has recorded the rescale's pause (at its first step in the new world)."""
        seen = {ip: metrics(ip) for ip in e2e_ns.runner.running().values()}
        ok = len(seen) == size and all(
            m.get("edl_trainer_world_size") == size and m.get("edl_trainer_generation") == gen
            for m in seen.values()
        )
        return seen if ok and (gen == 1 or _new_pauses(seen, pause_seen)) else None

    def last_pause(seen: dict[str, dict[str, float]]) -> float:
        """The newest pause of the longest-lived survivor (the one with the most rescales)."""
        fresh = _new_pauses(seen, pause_seen)
        for ip, m in seen.items():
            pause_seen[ip] = (m.get(_PAUSE + "_count", 0.0), m.get(_PAUSE + "_sum", 0.0))
        return fresh[max(fresh)] if fresh else 0.0

    try:
        gen = wait_for(
            lambda: watch.training_at(1, 0, 5),
            timeout_s=90,
            what="a world of 1 training",
            describe=logs,
        )
        last_pause(wait_for(lambda: agents_agree(1, gen), timeout_s=20, what="metrics of 1"))
        for size in (3, 2, 1):
            before = watch.global_step()
            t0 = time.monotonic()
            scale(size)
            gen = wait_for(
                lambda size=size, gen=gen: watch.training_at(size, gen, 8 if size > 1 else 1),
                timeout_s=90,
                what=f"a world of {size} training (after generation {gen})",
                describe=logs,
            )
            took = time.monotonic() - t0
            seen = wait_for(
                lambda size=size, gen=gen: agents_agree(size, gen),
                timeout_s=20,
                what=f"every agent exporting world_size {size}, generation {gen}",
                describe=logs,
            )
            steps.append(
                f"-> {size}: generation {gen}, trained {took:.1f} s after the scale "
                f"(global step {before} then), pause {last_pause(seen):.2f} s"
            )
            print(steps[-1])
        result = tmp_path / "result.json"
        wait_for(result.exists, timeout_s=150, what="the job to finish", describe=logs)
        final = json.loads(result.read_text())
        finished = wait_for(
            lambda: watch.record() if watch.record().get("finished") else None,
            timeout_s=30,
            what="the world record marked finished",
            describe=logs,
        )
        _finished_pods_idle(e2e_ns.runner.running, scale, watch, logs)
    finally:
        print(f"world history (s, generation, size): {watch.history}")
        try:
            scale(0)  # the agents leave; the namespace goes afterwards
        finally:
            _reap_trainers(tmp_path, SCRIPTS[framework])

    report = verify(tmp_path / "ledger")
    assert report.problems(NUM_TRAIN, EPOCHS) == []
    assert watch.sizes == [1, 3, 2, 1], watch.history
    assert len(steps) == 3
    assert final["world_size"] == 1
    assert final["global_step"] == report.steps == EPOCHS * STEPS_PER_EPOCH
    assert finished["finished_at_step"] == final["global_step"]
    restores = [report.restores[g] for g in report.generations]
    assert restores == sorted(restores)  # the global step never went back
    reference = reference_accuracy(tmp_path, TRAIN_ARGS, SCRIPTS[framework])
    print(
        f"generations {report.generations} restored at {restores}; "
        f"rolled back {report.rolled_back_steps}; "
        f"accuracy {final['accuracy']:.4f} vs one process {reference:.4f}"
    )
    assert abs(final["accuracy"] - reference) <= 0.01
    assert not e2e_ns.runner.errors, e2e_ns.runner.errors
    timings = [
        Timings.from_json(p.read_text()) for p in tmp_path.glob("members/*/control/timings-*")
    ]
    assert {t.reinit for t in timings} == ({"in-process"} if reinit == "auto" else {"process"})
    assert {t.framework for t in timings} == {framework}


_PAUSE = "edl_trainer_rescale_pause_seconds"


def _finished_pods_idle(
    running: Callable[[], dict[str, str]],
    scale: Callable[[int], None],
    watch: WorldWatch,
    logs: Callable[[], str],
) -> None:
    """After the end the last pod idles (not restarted, no trainer, ready); one added after
    the end (an HPA scale-up) reads the finished world and idles too, training nothing."""
    (survivor,) = wait_for(
        lambda: [ip for ip in running().values() if metrics(ip).get(_FINISHED) == 1] or None,
        timeout_s=30,
        what="the last agent exporting the finished job",
        describe=logs,
    )
    step = watch.global_step()
    scale(2)
    late = wait_for(
        lambda: (
            [
                ip
                for ip in running().values()
                if ip != survivor and metrics(ip).get(_FINISHED) == 1 and _ready(ip)
            ]
            or None
        ),
        timeout_s=60,
        what="a pod added after the end idling ready",
        describe=logs,
    )
    time.sleep(3)  # what its trainer would need to start and take a step
    for ip in (survivor, *late):
        assert metrics(ip).get("edl_trainer_up") == 0 and _ready(ip)
    assert len(running()) == 2 and watch.global_step() == step


def _ready(ip: str) -> bool:
    url = f"http://{ip}:{METRICS_PORT}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status == 200 and "finished at step" in resp.read().decode()
    except OSError:
        return False


_FINISHED = "edl_trainer_job_finished"


def _new_pauses(
    seen: dict[str, dict[str, float]], before: dict[str, tuple[float, float]]
) -> dict[float, float]:
    """rescale count -> the pause just added, for each agent whose histogram grew."""
    out = {}
    for ip, m in seen.items():
        count, total = m.get(_PAUSE + "_count", 0.0), m.get(_PAUSE + "_sum", 0.0)
        old_count, old_total = before.get(ip, (0.0, 0.0))
        if count > old_count:
            out[count] = total - old_total
    return out


def _trainers(tmp: Path, script: str) -> list[psutil.Process]:
    """This test's trainer processes (they run in their own session, outside the pod's)."""
    marker = str(tmp / "result.json")
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if marker in cmdline and script in cmdline:
            found.append(proc)
    return found


def _reap_trainers(tmp: Path, script: str, timeout_s: float = 40.0) -> None:
    """Waits (bounded) for this test's trainers to exit, then kills any left by a failure."""
    deadline = time.monotonic() + timeout_s
    while _trainers(tmp, script) and time.monotonic() < deadline:
        time.sleep(0.5)
    for proc in _trainers(tmp, script):
        proc.kill()
