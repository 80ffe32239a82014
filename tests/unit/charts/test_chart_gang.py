"""charts/edl-trainer `gang.enabled`: a Kubernetes 1.35 Workload that holds back every pod
until `workers.min` fit at once (docs/sizing.md, "Gang admission"), checked on what `helm
template` renders; tests/e2e/install/test_gang_scheduling.py runs it on a real kube-scheduler."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.support.helm import CHARTS, HelmFailed, helm, template

pytestmark = pytest.mark.slow  # each test runs helm

GANG = ("gang.enabled=true", "workers.min=3", "workers.max=6", "workers.initial=3")


def render(*sets: str) -> list[dict[str, Any]]:
    return template("edl-trainer", namespace="ml", release="digits", sets=sets)


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def test_the_pods_join_a_workload_named_after_min_whose_gang_is_min() -> None:
    docs = render(*GANG)
    (workload,) = of_kind(docs, "Workload")
    (deploy,) = of_kind(docs, "Deployment")
    assert workload["apiVersion"] == "scheduling.k8s.io/v1alpha1"
    assert workload["metadata"]["name"] == "digits-trainer-min3"
    assert workload["metadata"]["namespace"] == "ml"
    assert workload["metadata"]["labels"]["edl.paddlepaddle.org/job"] == "digits"
    assert workload["spec"] == {
        "controllerRef": {"apiGroup": "apps", "kind": "Deployment", "name": "digits-trainer"},
        "podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 3}}}],
    }
    assert deploy["metadata"]["name"] == "digits-trainer"
    pod = deploy["spec"]["template"]["spec"]
    assert pod["workloadRef"] == {"name": "digits-trainer-min3", "podGroup": "workers"}
    # A rolling update would run pods of two Workloads, each short of its minimum.
    assert deploy["spec"]["strategy"] == {"type": "Recreate"}


def test_a_new_min_is_a_new_workload_and_a_new_pod_template() -> None:
    """The Workload's spec is immutable: an upgrade to another min cannot patch it."""
    names = set()
    for min_ in (2, 4):
        docs = render("gang.enabled=true", f"workers.min={min_}", "workers.max=8")
        (workload,) = of_kind(docs, "Workload")
        (deploy,) = of_kind(docs, "Deployment")
        assert workload["spec"]["podGroups"][0]["policy"]["gang"]["minCount"] == min_
        ref = deploy["spec"]["template"]["spec"]["workloadRef"]
        assert ref["name"] == workload["metadata"]["name"]
        names.add(workload["metadata"]["name"])
    assert names == {"digits-trainer-min2", "digits-trainer-min4"}


def test_the_workload_follows_a_fullname_override() -> None:
    docs = render(*GANG, "fullnameOverride=vision")
    (workload,) = of_kind(docs, "Workload")
    assert workload["metadata"]["name"] == "vision-min3"
    assert workload["spec"]["controllerRef"]["name"] == "vision"


def test_off_by_default_nothing_of_it_is_rendered() -> None:
    for docs in (render(), render("gang.enabled=false", "workers.min=3", "workers.max=6")):
        assert not of_kind(docs, "Workload")
        (deploy,) = of_kind(docs, "Deployment")
        assert "workloadRef" not in deploy["spec"]["template"]["spec"]
        assert "strategy" not in deploy["spec"]  # the API server's default: RollingUpdate


def _template_on(version: str, *sets: str) -> list[dict[str, Any]]:
    args = ["template", "digits", str(CHARTS / "edl-trainer"), "--namespace", "ml",
            "--kube-version", version]  # fmt: skip
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(helm(*args)) if d]


@pytest.mark.parametrize("version", ["1.30.14", "1.34.3", "1.36.0", "1.37.1"])
def test_outside_1_35_it_refuses_with_one_line_that_says_why(version: str) -> None:
    with pytest.raises(HelmFailed) as refused:
        _template_on(version, *GANG)
    (error,) = [line for line in str(refused.value).splitlines() if "Error:" in line]
    assert error.endswith(
        f"gang.enabled: Kubernetes v{version} has no scheduling.k8s.io/v1alpha1 Workload "
        "with pod spec.workloadRef (only 1.35 has it; 1.36 replaced it): set gang.enabled=false"
    ), error
    assert of_kind(_template_on(version), "Deployment")  # off, the same version renders


@pytest.mark.parametrize("version", ["1.35.0", "1.35.4", "1.35.2-gke.1200"])
def test_any_1_35_release_renders_it(version: str) -> None:
    assert of_kind(_template_on(version, *GANG), "Workload")


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("gang.enabeld=true",), "additional properties 'enabeld' not allowed"),
        (("gang.enabled=yes",), "at '/gang/enabled': got string, want boolean"),
    ],
)
def test_the_schema_refuses_a_misspelt_or_mistyped_gang(
    sets: tuple[str, ...], message: str
) -> None:
    with pytest.raises(HelmFailed, match="don't meet the specifications of the schema") as e:
        render(*sets)
    assert message in str(e.value)
