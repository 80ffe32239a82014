"""The example trainer job renders, and fits the adapter, the agent and the HPA schema."""

from __future__ import annotations

import os
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.cli import build_parser, parse_args
from agent.elastic.runner import elastic_options
from edl_sim.hpa.manifest import parse_hpa
from metrics_adapter.kube.selectors import LabelSelector
from metrics_adapter.providers.sizing import DESIRED_REPLICAS, OBJECT_METRIC
from metrics_adapter.scraping.catalogue import MetricCatalogue
from metrics_adapter.sizing.kube_objects import (
    JOB_LABEL,
    MAX_WORKERS,
    MIN_WORKERS,
    JobDefaults,
    deployment_from,
    job_from,
)
from tests.support.kustomize import ROOT, render

EXAMPLE = "manifests/examples/digits-trainer"


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


@pytest.mark.slow
def test_sizing_hpa_reads_desired_replicas_of_its_job() -> None:
    docs = render(EXAMPLE)
    deploy = one(docs, "Deployment")
    raw = one(docs, "HorizontalPodAutoscaler")
    hpa = parse_hpa(raw)
    assert hpa.spec.scale_target_ref.name == deploy["metadata"]["name"]
    (metric,) = raw["spec"]["metrics"]
    assert metric["type"] == "External"
    assert metric["external"]["metric"]["name"] == DESIRED_REPLICAS
    assert metric["external"]["target"] == {"type": "AverageValue", "averageValue": "1"}
    selector = metric["external"]["metric"]["selector"]["matchLabels"]
    assert selector == {JOB_LABEL: deploy["metadata"]["labels"][JOB_LABEL]}
    behavior = raw["spec"]["behavior"]
    windows = [behavior[d]["stabilizationWindowSeconds"] for d in ("scaleUp", "scaleDown")]
    assert windows == [0, 0]  # the sizer holds growth off itself
    # The per-HPA tolerance (1.33+) is the component hpa-tolerance/, not the example's.
    assert "tolerance" not in behavior["scaleUp"] and "tolerance" not in behavior["scaleDown"]
    # The sizer's bounds agree with the HPA's.
    annotations = deploy["metadata"]["annotations"]
    assert int(annotations[MAX_WORKERS]) == hpa.spec.max_replicas
    assert int(annotations[MIN_WORKERS]) == hpa.spec.min_replicas


def with_object_metric_hpa(tmp_path: Path) -> list[dict[str, Any]]:
    """The example with hpa-sizing-object.yaml in place of hpa-sizing.yaml, as its
    kustomization's comment says for a cluster whose External API belongs to KEDA."""
    here = tmp_path / "digits-trainer"
    shutil.copytree(ROOT / EXAMPLE, here)
    kustomization = yaml.safe_load((here / "kustomization.yaml").read_text())
    resources = kustomization["resources"]
    resources[resources.index("hpa-sizing.yaml")] = "hpa-sizing-object.yaml"
    (here / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return render(str(here))


@pytest.mark.slow
def test_object_metric_hpa_reads_desired_replicas_of_the_example_deployment(
    tmp_path: Path,
) -> None:
    """hpa-sizing-object.yaml: its Object metric describes the example's own Deployment, on the
    resource the adapter serves desired_replicas on (deployments.apps)."""
    docs = with_object_metric_hpa(tmp_path)
    deploy = one(docs, "Deployment")
    raw = one(docs, "HorizontalPodAutoscaler")
    assert raw["metadata"]["namespace"] == deploy["metadata"]["namespace"]
    hpa = parse_hpa(raw)  # a valid autoscaling/v2 HPA
    target = hpa.spec.scale_target_ref
    assert (target.api_version, target.kind, target.name) == (
        deploy["apiVersion"],
        deploy["kind"],
        deploy["metadata"]["name"],
    )
    (metric,) = raw["spec"]["metrics"]
    assert metric["type"] == "Object"
    described = metric["object"]["describedObject"]
    assert described == {
        "apiVersion": deploy["apiVersion"],
        "kind": deploy["kind"],
        "name": deploy["metadata"]["name"],
    }
    group = deploy["apiVersion"].split("/")[0]
    assert OBJECT_METRIC.group_resource == f"{deploy['kind'].lower()}s.{group}"
    assert metric["object"]["metric"] == {"name": OBJECT_METRIC.metric}
    assert metric["object"]["target"] == {"type": "AverageValue", "averageValue": "1"}
    annotations = deploy["metadata"]["annotations"]
    assert int(annotations[MAX_WORKERS]) == hpa.spec.max_replicas
    assert int(annotations[MIN_WORKERS]) == hpa.spec.min_replicas


@pytest.mark.slow
def test_the_sizer_reads_the_example_as_a_job() -> None:
    deploy = one(render(EXAMPLE), "Deployment")
    record = deployment_from({**deploy, "metadata": {**deploy["metadata"], "namespace": "ml"}})
    assert record is not None and record.problem is None
    job = job_from(record, {}, JobDefaults())
    assert job.error is None
    assert (job.min_replicas, job.max_replicas, job.worker.cpu) == (1, 8, 1.0)


@pytest.mark.slow
def test_throughput_hpa_alternative_names_served_metrics() -> None:
    deploy = one(render(EXAMPLE), "Deployment")
    hpa = parse_hpa(yaml.safe_load((ROOT / EXAMPLE / "hpa-throughput.yaml").read_text()))
    assert hpa.spec.scale_target_ref.name == deploy["metadata"]["name"]
    served = MetricCatalogue.default().custom
    assert hpa.spec.metrics
    for metric in hpa.spec.metrics:
        assert metric.metric_name in served, metric.metric_name


@pytest.mark.slow
def test_adapter_base_discovers_the_trainer_pods() -> None:
    adapter = one(render("manifests/base"), "Deployment")
    args = adapter["spec"]["template"]["spec"]["containers"][0]["args"]
    (flag,) = [a for a in args if a.startswith("--pod-selector=")]
    selector = LabelSelector.parse(flag.split("=", 1)[1])
    labels = one(render(EXAMPLE), "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert selector.matches(labels)


@pytest.mark.slow
def test_trainer_command_is_a_valid_elastic_agent_invocation() -> None:
    deploy = one(render(EXAMPLE), "Deployment")
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    assert command[0] == "edl-agent"
    literal = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    settings, trainer = parse_args(command[1:], env=literal)
    assert trainer[:3] == ("python", "-m", "examples.train_digits_elastic")
    assert (ROOT / "examples" / "train_digits_elastic.py").exists()
    env = {e["name"] for e in container["env"]}
    assert {"EDL_NAMESPACE", "POD_NAME", "POD_IP"} <= env  # what kubernetes membership reads
    port = {p["name"]: p["containerPort"] for p in container["ports"]}["metrics"]
    assert port == settings.exporter.port == 9400


@pytest.mark.slow
def test_membership_role_allows_what_the_kubernetes_store_calls_and_no_more() -> None:
    role = one(render(EXAMPLE), "Role")
    granted = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    for verb in ("list", "watch", "create", "patch", "delete"):
        assert ("leases", verb) in granted
    for verb in ("get", "watch", "create", "update"):
        assert ("configmaps", verb) in granted
    # Every ConfigMap verb but create is limited to the world record's name.
    world = "edl-digits-world"
    for rule in role["rules"]:
        if "configmaps" in rule["resources"] and rule["verbs"] != ["create"]:
            assert rule["resourceNames"] == [world], rule
    # The watch is of the world record alone (a metadata.name field selector, which RBAC allows
    # for a named rule); no rule lists or watches ConfigMaps by any other name.
    assert ("configmaps", "list") not in granted
    binding = one(render(EXAMPLE), "RoleBinding")
    sa = one(render(EXAMPLE), "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"][0]["name"] == sa


def with_checkpoints(tmp_path: Path) -> list[dict[str, Any]]:
    """The example with its component `checkpoints/`, as its kustomization's comment says."""
    here = tmp_path / "with-checkpoints"
    here.mkdir()
    example = os.path.relpath(ROOT / EXAMPLE, here)
    kustomization = {"resources": [example], "components": [f"{example}/checkpoints"]}
    (here / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return render(str(here))  # an absolute path: ROOT / path is that path


@pytest.mark.slow
def test_the_example_runs_on_a_stock_cluster_from_the_image_make_images_builds() -> None:
    docs = render(EXAMPLE)
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]  # no RWX class needed
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert not [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
    script = (ROOT / "scripts/build-images.sh").read_text()
    (image,) = [c["image"] for c in pod["containers"]]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert image == f"localhost/edl-trainer:{version}"
    assert 'trainer) build trainer trainer "$REPO/edl-trainer:$VERSION"' in script
    assert 'REPO="${IMAGE_REPO:-localhost}"' in script


@pytest.mark.slow
def test_finished_jobs_scale_their_own_deployment_to_zero() -> None:
    docs = render(EXAMPLE)
    deploy = one(docs, "Deployment")
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    literal = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    options = elastic_options(build_parser(elastic=True), container["command"][1:], literal)
    assert options is not None and options.on_finished == "scale-to-zero"
    assert options.deployment == deploy["metadata"]["name"]
    role = one(docs, "Role")
    named = [r for r in role["rules"] if "deployments/scale" in r["resources"]]
    assert named and named[0]["resourceNames"] == [deploy["metadata"]["name"]]
    assert "patch" in named[0]["verbs"]
    # never the Deployment itself: a trainer that could patch it could rewrite its pod template
    assert not [r for r in role["rules"] if "deployments" in r["resources"]]
    # the trainer policy of manifests/base knows the ServiceAccount's job by its label
    account = one(docs, "ServiceAccount")
    assert account["metadata"]["labels"]["edl.paddlepaddle.org/job"] == options.job


@pytest.mark.slow
def test_every_trainer_pod_mounts_the_checkpoint_claim_its_agent_writes_to(
    tmp_path: Path,
) -> None:
    docs = with_checkpoints(tmp_path)
    claim = one(docs, "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]  # every pod, on any node
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    literal = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    options = elastic_options(
        build_parser(elastic=True),
        container["command"][1:],
        {**literal, "EDL_ELASTIC_DIR": str(tmp_path)},
    )
    assert options is not None and options.checkpoints.enabled
    assert options.checkpoints.every_steps > 0 and options.checkpoints.keep >= 2
    (volume,) = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["mountPath"] == options.checkpoints.url and not mount.get("readOnly")
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsUser"]
