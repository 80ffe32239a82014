"""Every trainer pod we ship gives its agent time for a planned leave.

On SIGTERM the agent asks its trainer to stop at a step boundary and waits `EDL_DRAIN_TIMEOUT`
for it, then SIGTERM, 5 s, SIGKILL, 5 s (`agent.elastic.phases`, LEAVING): the pod's
`terminationGracePeriodSeconds` must exceed that, or the kubelet kills a trainer that is still
saving its state (docs/elastic.md §1 "On Kubernetes", §4.3). The drain timeout is read the way
the agent reads it, from the container's command and environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.elastic.phases import STOP_GRACE_SECONDS
from agent.elastic.runner import elastic_options
from agent.process.cli import build_parser
from tests.support.helm import examples, template
from tests.support.kustomize import render
from tests.unit.examples.test_example_manifests import EXAMPLE, with_checkpoints

BEYOND_DRAIN = 2 * STOP_GRACE_SECONDS
"""What the LEAVING phase adds to the drain timeout: SIGTERM, 5 s, SIGKILL, 5 s."""
KUBERNETES_DEFAULT_GRACE = 30
"""A pod spec without the field gets this."""


def agent_pods(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pod specs of the Deployments whose container runs `edl-agent run --elastic`."""
    pods = []
    for doc in docs:
        if doc["kind"] != "Deployment":
            continue
        pod = doc["spec"]["template"]["spec"]
        if any(c.get("command", [""])[0] == "edl-agent" for c in pod["containers"]):
            pods.append(pod)
    return pods


def drain_timeout(pod: dict[str, Any], tmp_path: Path) -> float:
    """The agent's `EDL_DRAIN_TIMEOUT` in this pod: its flags, then its literal environment."""
    (container,) = [c for c in pod["containers"] if c["command"][0] == "edl-agent"]
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    env["EDL_ELASTIC_DIR"] = str(tmp_path)
    options = elastic_options(build_parser(elastic=True), container["command"][1:], env)
    assert options is not None
    return options.timeouts.drain_timeout


def grace(pod: dict[str, Any]) -> float:
    return float(pod.get("terminationGracePeriodSeconds", KUBERNETES_DEFAULT_GRACE))


def rendered(source: str, tmp_path: Path) -> list[dict[str, Any]]:
    if source == "manifest":
        return render(EXAMPLE)
    if source == "manifest+checkpoints":
        return with_checkpoints(tmp_path)
    return template("edl-trainer", Path(source), namespace="ml", release="digits")


@pytest.mark.slow
@pytest.mark.parametrize(
    "source",
    ["manifest", "manifest+checkpoints", *(str(p) for p in examples("edl-trainer"))],
    ids=lambda s: Path(s).stem,
)
def test_the_grace_period_outlasts_a_planned_leave(source: str, tmp_path: Path) -> None:
    pods = agent_pods(rendered(source, tmp_path))
    assert pods, "no Deployment runs edl-agent"
    for pod in pods:
        bound = drain_timeout(pod, tmp_path) + BEYOND_DRAIN
        assert grace(pod) > bound, (
            f"terminationGracePeriodSeconds {grace(pod):g} does not exceed the agent's bound "
            f"on a leave ({bound:g} s: EDL_DRAIN_TIMEOUT + {BEYOND_DRAIN:g} s)"
        )


@pytest.mark.slow
def test_a_longer_drain_set_in_the_pod_is_read_and_caught(tmp_path: Path) -> None:
    sets = ("env[0].name=EDL_DRAIN_TIMEOUT", "env[0].value=55s")
    (pod,) = agent_pods(template("edl-trainer", namespace="ml", release="digits", sets=sets))
    assert drain_timeout(pod, tmp_path) == 55.0
    assert not grace(pod) > drain_timeout(pod, tmp_path) + BEYOND_DRAIN  # 60 s: too short
