"""The chart conventions platform teams expect (values.schema.json, overridable security
contexts, host network, spread, extra env/volumes, pod labels, log format, dataset and
/dev/shm), checked on what `helm template` renders and on the packaged charts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from metrics_adapter.cli import build_parser
from tests.support.helm import CHARTS, HelmFailed, helm, template

pytestmark = pytest.mark.slow  # each test runs helm

RELEASE = {"edl": ("edl-system", "edl"), "edl-trainer": ("ml", "digits")}
RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def render(chart: str, *sets: str, values: Path | None = None) -> list[dict[str, Any]]:
    namespace, release = RELEASE[chart]
    return template(chart, values, namespace=namespace, release=release, sets=sets)


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    spec: dict[str, Any] = deploy["spec"]["template"]["spec"]
    return spec


def pod_template(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    return dict(deploy["spec"])


@pytest.mark.parametrize(
    ("chart", "sets", "message"),
    [
        ("edl", ("replicas=two",), "at '/replicas': got string, want integer"),
        ("edl", ("replicass=2",), "additional properties 'replicass' not allowed"),
        ("edl", ("tls.validityDays=ten",), "at '/tls/validityDays': got string, want integer"),
        ("edl", ("podDisruptionBudget.enabeld=true",), "'enabeld' not allowed"),
        ("edl", ("hostNetwork=yes",), "at '/hostNetwork': got string, want boolean"),
        ("edl", ("logFormat=xml",), "at '/logFormat': value must be one of 'text', 'json'"),
        ("edl-trainer", ("workers.max=eight",), "at '/workers/max': got string, want integer"),
        ("edl-trainer", ("worker.max=8",), "additional properties 'worker' not allowed"),
        ("edl-trainer", ("shm.enabled=1",), "at '/shm/enabled': got number, want boolean"),
        ("edl-trainer", ("dataset.mountPath=data",), "at '/dataset/mountPath'"),
    ],
)
def test_the_schema_refuses_wrong_types_and_unknown_keys(
    chart: str, sets: tuple[str, ...], message: str
) -> None:
    with pytest.raises(HelmFailed, match="don't meet the specifications of the schema") as e:
        render(chart, *sets)
    assert message in str(e.value)


@pytest.mark.parametrize("chart", sorted(RELEASE))
def test_the_defaults_stay_restricted_with_the_images_user(chart: str) -> None:
    spec = pod_spec(render(chart))
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == spec["securityContext"]["runAsGroup"] == 65532
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["containers"][0]["securityContext"] == RESTRICTED_CONTAINER
    assert "hostNetwork" not in spec and "dnsPolicy" not in spec


@pytest.mark.parametrize(
    ("chart", "example"), [("edl", "openshift.yaml"), ("edl-trainer", "dataset-shm.yaml")]
)
def test_a_cluster_that_assigns_the_uid_gets_no_fixed_one(chart: str, example: str) -> None:
    """OpenShift's restricted-v2 refuses a runAsUser outside the namespace's range."""
    spec = pod_spec(render(chart, values=CHARTS / chart / "examples" / example))
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert spec["containers"][0]["securityContext"] == RESTRICTED_CONTAINER


@pytest.mark.parametrize("chart", sorted(RELEASE))
def test_the_container_security_context_can_be_replaced(chart: str) -> None:
    spec = pod_spec(render(chart, "securityContext.readOnlyRootFilesystem=false"))
    assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is False
    assert spec["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


@pytest.mark.parametrize("chart", sorted(RELEASE))
def test_host_network_takes_the_cluster_dns_along_unless_told_otherwise(chart: str) -> None:
    spec = pod_spec(render(chart, "hostNetwork=true"))
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    spec = pod_spec(render(chart, "hostNetwork=true", "dnsPolicy=Default"))
    assert spec["dnsPolicy"] == "Default"


@pytest.mark.parametrize("chart", ["edl", "edl-trainer"])
def test_extra_env_is_the_name_and_env_stays_an_alias(chart: str) -> None:
    """extraEnv, as prometheus-adapter's and KEDA's charts name it; `env` (the old name) is
    still read, its entries first, so a values file written for either keeps working."""
    (container,) = pod_spec(render(chart, "extraEnv[0].name=A", "extraEnv[0].value=x",
                                   "env[0].name=B", "env[0].value=y"))["containers"]  # fmt: skip
    names = [e["name"] for e in container["env"]]
    assert names[-2:] == ["B", "A"]
    (container,) = pod_spec(render(chart, "extraEnv[0].name=A", "extraEnv[0].value=x"))[
        "containers"
    ]
    assert container["env"][-1] == {"name": "A", "value": "x"}
    with pytest.raises(HelmFailed, match="at '/extraEnv/0': got string, want object"):
        render(chart, "extraEnv[0]=A=1")


def test_the_adapter_example_carries_every_pod_convention_into_the_pod() -> None:
    docs = render("edl", values=CHARTS / "edl/examples/openshift.yaml")
    deploy = pod_template(docs)
    spec = deploy["template"]["spec"]
    assert deploy["template"]["metadata"]["labels"]["team"] == "ml-platform"
    assert "team" not in deploy["selector"]["matchLabels"]  # a selector never changes
    (spread,) = spec["topologySpreadConstraints"]
    assert spread["labelSelector"]["matchLabels"].items() <= (
        deploy["template"]["metadata"]["labels"].items()
    )
    (container,) = spec["containers"]
    assert {"name": "TZ", "value": "Etc/UTC"} in container["env"]
    assert "corporate-ca" in {v["name"] for v in spec["volumes"]}
    assert "/etc/corporate-ca" in {m["mountPath"] for m in container["volumeMounts"]}
    args = build_parser().parse_args(container["args"])
    assert args.log_format == "json"


def test_the_trainer_mounts_its_dataset_and_a_memory_backed_shm() -> None:
    docs = render("edl-trainer", values=CHARTS / "edl-trainer/examples/dataset-shm.yaml")
    spec = pod_spec(docs)
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["dataset"]["persistentVolumeClaim"] == {
        "claimName": "digits-data",
        "readOnly": True,
    }
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}
    assert "hf-cache" in volumes
    (container,) = spec["containers"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/data"] == {"name": "dataset", "mountPath": "/data", "readOnly": True}
    assert mounts["/dev/shm"]["name"] == "dshm"
    assert mounts["/var/cache/models"]["name"] == "hf-cache"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["EDL_LOG_FORMAT"] == "json" and env["OMP_NUM_THREADS"] == "1"
    metadata = pod_template(docs)["template"]["metadata"]
    assert metadata["labels"]["team"] == "vision"
    assert metadata["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
    assert metadata["annotations"]["prometheus.io/port"] == "9400"  # the chart's stay


def test_a_dataset_without_a_volume_is_one_clear_error() -> None:
    with pytest.raises(HelmFailed, match=r"dataset\.enabled needs dataset\.volume"):
        render("edl-trainer", "dataset.enabled=true")


def test_by_default_the_trainer_has_no_dataset_or_shm_volume() -> None:
    spec = pod_spec(render("edl-trainer"))
    assert {v["name"] for v in spec["volumes"]} == {"edl-run", "tmp"}


@pytest.mark.parametrize("chart", sorted(RELEASE))
def test_the_packaged_chart_carries_its_schema(chart: str, tmp_path: Path) -> None:
    """What `make dist` ships (helm package) refuses bad values as the source chart does."""
    helm("package", str(CHARTS / chart), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob(f"{chart}-*.tgz")
    namespace, release = RELEASE[chart]
    helm("template", release, str(archive), "--namespace", namespace)
    with pytest.raises(HelmFailed, match="additional properties 'typo' not allowed"):
        helm("template", release, str(archive), "--namespace", namespace, "--set", "typo=1")
