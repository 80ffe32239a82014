"""The elastic digits job on the e2e control plane: RBAC, the agent container, its world.

Shared by the e2e elastic tests (kubectl scale, checkpoints, the sizer): every pod runs
`edl-agent run --elastic --membership kubernetes` as ServiceAccount `edl-trainer` around the
elastic digits example; `WorldWatch` reads the world record ConfigMap and the sample ledger.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml
from kubernetes import client

from agent.trainer.step_gate import StepGate
from tests.e2e.harness.bodies import as_body
from tests.e2e.harness.controlplane import ControlPlane
from tests.e2e.harness.session import Kubectl
from tests.e2e.harness.workloads import METRICS_PORT
from tests.support.digits_job import NUM_TRAIN
from tests.support.waiting import WaitTimeout, wait_for

JOB = "digits"
EPOCHS = 10
GLOBAL_BATCH = 64
STEPS_PER_EPOCH = -(-NUM_TRAIN // GLOBAL_BATCH)
TRAIN_ARGS = ["--epochs", str(EPOCHS), "--global-batch", str(GLOBAL_BATCH), "--seed", "3"]
STEP_SLEEP = 0.25
"""Simulated compute per step. That the job's 230 steps outlast a test's rescales is not left
to it: a test holds the job at a step gate between its events (`WorldWatch.gate`)."""
SERVICE_ACCOUNT = "edl-trainer"
AGENT_RULES = [
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "watch", "create", "update"]},
]
"""What docs/elastic.md says the agents need, and nothing more."""


def grant_agent_access(
    ns: str,
    api: client.ApiClient,
    kubectl: Kubectl,
    cp: ControlPlane,
    path: Path,
    rules: list[dict[str, Any]] | None = None,
    sa_labels: dict[str, str] | None = None,
) -> Path:
    """ServiceAccount (labelled `sa_labels`) + Role (`rules`, default AGENT_RULES) +
    RoleBinding; writes a kubeconfig holding the SA's token."""
    assert cp.pki is not None
    client.CoreV1Api(api).create_namespaced_service_account(
        ns, as_body({"metadata": {"name": SERVICE_ACCOUNT, "labels": sa_labels or {}}})
    )
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(
        ns, as_body({"metadata": {"name": "edl-agent"}, "rules": rules or AGENT_RULES})
    )
    rbac.create_namespaced_role_binding(
        ns,
        as_body(
            {
                "metadata": {"name": "edl-agent"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "edl-agent",
                },
                "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": ns}],
            }
        ),
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


AGENT_TIMINGS: list[dict[str, str]] = [
    # Two pods of one `kubectl scale` warm up seconds apart on a loaded 2-core box (seen:
    # > 2 s); the debounce must cover that spread for one scale to be one generation.
    {"name": "EDL_DEBOUNCE", "value": "4"},
    {"name": "EDL_MAX_DEBOUNCE", "value": "12"},
    {"name": "EDL_HEARTBEAT_INTERVAL", "value": "1"},
    {"name": "EDL_MEMBER_TTL", "value": "10"},
    {"name": "EDL_POLL_INTERVAL", "value": "0.3"},
    {"name": "EDL_INIT_TIMEOUT", "value": "600"},  # a bound for failures, not a speed
]
"""The e2e trainers' membership timings (env), shared by the pod runner's and the kubelet's."""


def elastic_container(
    tmp: Path,
    kubeconfig: Path,
    reinit: str,
    script: str,
    train_args: list[str] | None = None,
    step_gate: StepGate | None = None,
) -> dict[str, Any]:
    """`edl-agent run --elastic --membership kubernetes` around a digits elastic example.

    The agent is the container command itself: once the job is finished it idles (ready, no
    trainer) until the pod is deleted, so the Deployment never restarts the finished job.
    With `step_gate` the trainers hold at it (`agent.trainer.step_gate`; the pods are local
    processes, so they read the test's file).
    """
    command = [
        "edl-agent", "run", "--host=$(POD_IP)", f"--port={METRICS_PORT}", "--elastic",
        "--job", JOB, "--membership", "kubernetes", "--min", "1", "--max", "4", "--",
        "python", "-m", script,
        *(train_args or [*TRAIN_ARGS, "--step-sleep", str(STEP_SLEEP)]),
        "--result", str(tmp / "result.json"),
        *(["--step-gate", str(step_gate.path)] if step_gate is not None else []),
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
        *AGENT_TIMINGS,
        {"name": "EDL_DRAIN_TIMEOUT", "value": "30"},
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
    gate: StepGate | None = None
    """The job's step gate, if it has one: `training_at` opens it as far as the awaited
    world needs (and 10 steps more), so the job cannot end before the test's events."""

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
        if gen <= after or n != size:
            return None
        done = self.steps_in(gen)
        if done < steps and self.gate is not None:
            started = self.global_step() + 1
            if started >= self.gate.allowed():
                self.gate.allow(started + steps - done + 10)
        return gen if done >= steps else None

    def global_step(self) -> int:
        best = -1
        for path in self.ledger.glob("ledger-*.jsonl"):
            for line in path.read_text().splitlines():
                if '"s":' in line:
                    best = max(best, int(json.loads(line)["s"]))
        return best


def trainers(tmp: Path, script: str) -> list[psutil.Process]:
    """This test's trainer processes (they run in their own session, outside the pod's)."""
    marker = str(tmp / "result.json")
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if marker in cmdline and script in cmdline:
            found.append(proc)
    return found


def reap_trainers(tmp: Path, script: str, timeout_s: float = 40.0) -> None:
    """Waits (bounded) for this test's trainers to exit, then kills any left by a failure."""
    with contextlib.suppress(WaitTimeout):
        wait_for(lambda: not trainers(tmp, script), timeout_s=timeout_s, what="trainers gone")
    for proc in trainers(tmp, script):
        proc.kill()
