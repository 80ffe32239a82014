"""charts/edl and charts/edl-trainer: lint, and what `helm template` renders for each example.

The adapter's arguments are parsed by the adapter's own parser, the trainer's by the agent's;
the default TLS mode renders the same objects every time without a cluster (GitOps);
the catalogue, the alert rules and the RBAC match what manifests/ installs.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.elastic.runner import elastic_options
from agent.process.cli import build_parser as agent_parser
from metrics_adapter.cli import build_parser, settings_from_args
from metrics_adapter.settings import AdapterSettings
from tests.support.crd_schemas import prometheus_operator_schema
from tests.support.helm import CHARTS, HelmFailed, examples, helm, template
from tests.support.kustomize import ROOT, render

EDL_EXAMPLES = examples("edl")
TRAINER_EXAMPLES = examples("edl-trainer")
APISERVICES = {
    "customV1beta2": "v1beta2.custom.metrics.k8s.io",
    "customV1beta1": "v1beta1.custom.metrics.k8s.io",
    "externalV1beta1": "v1beta1.external.metrics.k8s.io",
}


def kinds(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = kinds(docs, kind)
    return doc


def values_of(path: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(path.read_text())
    return loaded if isinstance(loaded, dict) else {}


def adapter_settings(docs: list[dict[str, Any]]) -> AdapterSettings:
    (container,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return settings_from_args(build_parser().parse_args(container["args"]), env={})


def test_there_are_examples_for_both_charts() -> None:
    assert len(EDL_EXAMPLES) >= 4 and len(TRAINER_EXAMPLES) >= 3


@pytest.mark.slow
@pytest.mark.parametrize(
    ("chart", "values"),
    [("edl", p) for p in EDL_EXAMPLES] + [("edl-trainer", p) for p in TRAINER_EXAMPLES],
    ids=lambda v: v.name if isinstance(v, Path) else v,
)
def test_helm_lint_strict_passes_for_every_example(chart: str, values: Path) -> None:
    out = helm("lint", "--strict", str(CHARTS / chart), "-f", str(values))
    assert "1 chart(s) linted, 0 chart(s) failed" in out, out


@pytest.mark.slow
@pytest.mark.parametrize("values", EDL_EXAMPLES, ids=lambda p: p.name)
def test_each_adapter_example_serves_what_its_values_say(values: Path) -> None:
    v = values_of(values)
    docs = template("edl", values)
    settings = adapter_settings(docs)
    assert settings.sizing is v.get("sizing", {}).get("enabled", True)
    switches = {**dict.fromkeys(APISERVICES, True), **v.get("apiServices", {})}
    served = {d["metadata"]["name"] for d in kinds(docs, "APIService")}
    assert served == {name for key, name in APISERVICES.items() if switches[key]}
    for api in kinds(docs, "APIService"):
        assert api["spec"]["service"] == {
            "name": "edl-metrics-adapter", "namespace": "edl-system", "port": 443}  # fmt: skip
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod.get("priorityClassName", "") == v.get("priorityClassName", "system-cluster-critical")
    assert pod["securityContext"]["runAsNonRoot"] is True
    mode = v.get("tls", {}).get("mode", "auto")
    if mode in ("auto", "certManager"):  # auto without a cluster: certManager
        assert one(docs, "Certificate")["spec"]["secretName"] == "edl-metrics-adapter-tls"
        for api in kinds(docs, "APIService"):
            assert api["metadata"]["annotations"] == {
                "cert-manager.io/inject-ca-from": "edl-system/edl-metrics-adapter"}  # fmt: skip
    if mode in ("generate", "certManager", "existingSecret"):
        assert settings.tls_cert_file == Path("/var/run/serving-cert/tls.crt")
    monitoring = v.get("monitoring", {})
    for key, kind in (("podMonitor", "PodMonitor"), ("serviceMonitor", "ServiceMonitor"),
                      ("prometheusRule", "PrometheusRule")):  # fmt: skip
        assert len(kinds(docs, kind)) == int(monitoring.get(key, {}).get("enabled", False))
    tokens = [d for d in docs if d["kind"] == "Secret" and d.get("type", "").endswith("token")]
    assert len(tokens) == int(monitoring.get("serviceMonitor", {}).get("enabled", False))
    schema = prometheus_operator_schema()
    for doc in docs:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            assert schema.errors(doc) == []


@pytest.mark.slow
def test_a_render_without_a_cluster_is_stable_and_leaves_the_ca_to_cert_manager() -> None:
    """Argo CD renders with `helm template` on every sync: the default (tls.mode=auto) must
    render the same objects each time, and no key or CA of Helm's making."""
    first, second = template("edl"), template("edl")
    assert first == second
    assert not [d for d in first if d["kind"] == "Secret"]
    certificate = one(first, "Certificate")
    assert certificate["spec"]["secretName"] == "edl-metrics-adapter-tls"
    assert certificate["spec"]["issuerRef"] == {"name": "edl-metrics-adapter-selfsigned",
                                                "kind": "Issuer"}  # fmt: skip
    for api in kinds(first, "APIService"):
        assert api["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": "edl-system/edl-metrics-adapter"}  # fmt: skip
        assert "caBundle" not in api["spec"] and "insecureSkipTLSVerify" not in api["spec"]
    volume = one(first, "Deployment")["spec"]["template"]["spec"]["volumes"][1]
    assert volume == {"name": "serving-cert", "secret": {"secretName": "edl-metrics-adapter-tls"}}


@pytest.mark.slow
def test_generate_refuses_to_render_without_a_cluster() -> None:
    """tls.mode=generate keeps its CA by looking up its Secret; without a cluster each render
    would mint a new one, so it names the modes that work there instead."""
    with pytest.raises(HelmFailed) as refused:
        template("edl", sets=("tls.mode=generate",))
    (line,) = [x for x in str(refused.value).splitlines() if "tls.mode=generate" in x]
    assert line.endswith(
        "tls.mode=generate needs the cluster (helm install/upgrade) to keep its CA; rendered "
        "without one (helm template, Argo CD, lint) it would mint a new CA each time: set "
        "tls.mode=auto, certManager, or existingSecret (with tls.existingSecret.name and "
        "tls.existingSecret.caBundle)"
    )


@pytest.mark.slow
def test_the_service_monitor_sends_a_token_from_a_secret_not_a_file() -> None:
    """`authorization` (bearerTokenFile is deprecated in prometheus-operator): by default the
    token of a ServiceAccount of the chart's, bound to GET /metrics only; or a Secret of yours."""
    schema = prometheus_operator_schema()
    on = ("monitoring.serviceMonitor.enabled=true",)
    docs = template("edl", sets=on)
    (endpoint,) = one(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert "bearerTokenFile" not in endpoint
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": "edl-metrics-adapter-metrics-scraper-token", "key": "token"},
    }
    secret = one(docs, "Secret")
    assert (secret["metadata"]["name"], secret["metadata"]["namespace"], secret["type"]) == (
        "edl-metrics-adapter-metrics-scraper-token", "edl-system",
        "kubernetes.io/service-account-token")  # fmt: skip
    account = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    assert account in {d["metadata"]["name"] for d in kinds(docs, "ServiceAccount")}
    bindings = kinds(docs, "ClusterRoleBinding")
    binding = next(d for d in bindings if "scraper" in d["roleRef"]["name"])
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": "edl-system"}]  # fmt: skip
    role = next(d for d in kinds(docs, "ClusterRole") if "scraper" in d["metadata"]["name"])
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert schema.errors(one(docs, "ServiceMonitor")) == []

    yours = template("edl", sets=(*on, "monitoring.serviceMonitor.tokenSecret.create=false",
                                  "monitoring.serviceMonitor.tokenSecret.name=prom-token",
                                  "monitoring.serviceMonitor.tokenSecret.key=jwt"))  # fmt: skip
    (endpoint,) = one(yours, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["authorization"]["credentials"] == {"name": "prom-token", "key": "jwt"}
    assert not kinds(yours, "Secret")
    assert not [d for d in kinds(yours, "ClusterRoleBinding") if "scraper" in d["roleRef"]["name"]]
    assert schema.errors(one(yours, "ServiceMonitor")) == []
    missing = re.escape("monitoring.serviceMonitor.tokenSecret.name is required")
    with pytest.raises(HelmFailed, match=missing):
        template("edl", sets=(*on, "monitoring.serviceMonitor.tokenSecret.create=false"))


@pytest.mark.slow
def test_the_chart_installs_the_catalogue_alerts_rbac_and_trainer_policy_of_the_manifests() -> None:
    docs = template("edl", CHARTS / "edl/examples/production.yaml")
    configmaps = kinds(docs, "ConfigMap")
    (catalogue_map,) = [d for d in configmaps if "catalogue.yaml" in d.get("data", {})]
    catalogue = catalogue_map["data"]["catalogue.yaml"]
    assert catalogue == (ROOT / "manifests/base/catalogue.yaml").read_text()
    rule = one(render("manifests/monitoring"), "PrometheusRule")
    assert one(docs, "PrometheusRule")["spec"] == rule["spec"]
    base = render("manifests/base")
    ours = sorted(yaml.safe_dump(d["rules"]) for d in kinds(base, "ClusterRole"))
    every_namespace = template("edl")  # the manifests watch every namespace, as this does
    chart = [
        d for d in kinds(every_namespace, "ClusterRole") if "scraper" not in d["metadata"]["name"]
    ]
    assert sorted(yaml.safe_dump(d["rules"]) for d in chart) == ours
    # The history ConfigMap is the chart's own, so the adapter may only read and replace it.
    history = next(d for d in kinds(docs, "ConfigMap") if "data" not in d)
    roles = {d["metadata"]["name"]: d for d in kinds(docs, "Role")}
    (rule,) = roles["edl-metrics-adapter-sizing-history"]["rules"]
    assert rule["resourceNames"] == [history["metadata"]["name"]] == ["edl-sizing-history"]
    assert rule["verbs"] == ["get", "update"]
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        assert one(docs, kind) == one(base, kind) | {"metadata": one(docs, kind)["metadata"]}
        assert one(docs, kind)["metadata"]["name"] == one(base, kind)["metadata"]["name"]
    policy = (CHARTS / "edl/files/trainer-policy.yaml").read_text()
    assert policy == (ROOT / "manifests/base/trainer-policy.yaml").read_text()
    assert not kinds(
        template("edl", sets=("trainerPolicy.create=false",)), "ValidatingAdmissionPolicy"
    )


@pytest.mark.slow
def test_watching_one_namespace_the_adapter_reads_it_through_a_role() -> None:
    """source.namespace: pods and ReplicaSets through a Role there; a ClusterRole only for the
    sizer, which needs the whole cluster (a node's free room depends on every pod on it)."""
    scraping = {"pods": ["get", "list", "watch"], "replicasets": ["get"]}
    for example, sizer in (("production.yaml", True), ("one-namespace.yaml", False)):
        docs = template("edl", CHARTS / "edl/examples" / example)
        (source,) = [d for d in kinds(docs, "Role") if d["metadata"]["name"].endswith("-source")]
        assert source["metadata"]["namespace"] == "ml"
        assert {r: rule["verbs"] for rule in source["rules"] for r in rule["resources"]} == scraping
        binding = next(
            d for d in kinds(docs, "RoleBinding") if d["roleRef"]["name"].endswith("-source")
        )
        assert binding["metadata"]["namespace"] == "ml"
        cluster = [
            d for d in kinds(docs, "ClusterRole") if d["metadata"]["name"] == "edl-metrics-adapter"
        ]
        granted = {
            r: rule["verbs"] for d in cluster for rule in d["rules"] for r in rule["resources"]
        }
        assert "replicasets" not in granted and "get" not in granted.get("pods", [])
        assert bool(cluster) is sizer and ("nodes" in granted) is sizer


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("tls.mode=vault",), "at '/tls/mode': value must be one of 'auto', 'generate'"),
        (("tls.mode=existingSecret",), "tls.existingSecret.caBundle is required"),
        (
            ("tls.mode=existingSecret", "tls.existingSecret.caBundle=Zm9v"),
            "tls.existingSecret.name is required",
        ),
    ],
)
def test_bad_adapter_values_are_one_clear_error(sets: tuple[str, ...], message: str) -> None:
    with pytest.raises(HelmFailed, match=message):
        template("edl", sets=sets)


@pytest.mark.slow
@pytest.mark.parametrize("values", TRAINER_EXAMPLES, ids=lambda p: p.name)
def test_each_trainer_example_is_an_agent_invocation_its_role_and_hpa_fit(
    values: Path, tmp_path: Path
) -> None:
    v = values_of(values)
    docs = template("edl-trainer", values, namespace="ml", release="digits")
    deploy = one(docs, "Deployment")
    name = deploy["metadata"]["name"]
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    literal = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    options = elastic_options(
        agent_parser(elastic=True), container["command"][1:],
        {**literal, "EDL_ELASTIC_DIR": str(tmp_path)},
    )  # fmt: skip
    assert options is not None and options.membership == "kubernetes"
    assert options.on_finished == "scale-to-zero" and options.deployment == name
    policy = v.get("failurePolicy", {})
    assert options.timeouts.failures.budget == policy.get("budget", 5)
    assert options.timeouts.failures.window == {"10m": 600.0}.get(policy.get("window", "10m"))
    wanted = v.get("checkpoints", {})
    assert options.checkpoints.enabled is wanted.get("enabled", False)
    on_volume = options.checkpoints.enabled and not wanted.get("url")
    assert len(kinds(docs, "PersistentVolumeClaim")) == int(on_volume)
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert ("/var/lib/edl/checkpoints" in mounts) is on_volume
    if wanted.get("url"):  # object storage: the URL, and the SDK's variables from the values
        assert options.checkpoints.url == wanted["url"]
        s3 = wanted.get("s3", {}) if wanted["url"].startswith("s3://") else {}
        assert literal.get("AWS_ENDPOINT_URL") == s3.get("endpoint")
        assert literal.get("AWS_REGION") == s3.get("region")
        secrets = [n for n in (wanted.get("credentialsSecret"), s3.get("credentialsSecret")) if n]
        assert container.get("envFrom", []) == [{"secretRef": {"name": n}} for n in secrets]
    role = one(docs, "Role")
    world = one(docs, "ConfigMap")
    assert world["metadata"]["name"] == f"edl-{options.job}-world" and "data" not in world
    for rule in role["rules"]:
        if rule["resources"] == ["configmaps"]:
            assert rule["resourceNames"] == [world["metadata"]["name"]]
            assert "create" not in rule["verbs"]
        if "deployments" in rule["resources"][0]:
            assert rule["resources"] == ["deployments/scale"]  # never the pod template
            assert rule["resourceNames"] == [name]
    account = one(docs, "ServiceAccount")  # the trainer policy knows its job by this label
    assert account["metadata"]["labels"]["edl.paddlepaddle.org/job"] == options.job
    if not v.get("affinity"):  # by default the workers are packed per node, as the manifests do
        affinity = deploy["spec"]["template"]["spec"]["affinity"]["podAffinity"]
        (term,) = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
        assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
        selector = term["podAffinityTerm"]["labelSelector"]["matchLabels"]
        assert selector == {"edl.paddlepaddle.org/job": options.job}
    hpa = one(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == name
    (metric,) = hpa["spec"]["metrics"]
    mode = v.get("autoscaling", {}).get("mode", "sizing")
    expected = {"sizing": "External", "sizingObject": "Object", "throughput": "Pods"}[mode]
    assert metric["type"] == expected
    if mode == "sizingObject":
        assert metric["object"]["describedObject"] == {
            "apiVersion": "apps/v1", "kind": "Deployment", "name": name}  # fmt: skip
        assert metric["object"]["metric"]["name"] == "desired_replicas"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("job=Digits_1",), "at '/job': 'Digits_1' does not match pattern"),
        (("workers.min=5", "workers.max=2"), "workers.min 5 is above workers.max 2"),
        (("onFinished=delete",), "at '/onFinished': value must be one of 'scaleToZero', 'idle'"),
        (("failurePolicy.budget=-1",), "at '/failurePolicy/budget': minimum"),
        (("failurePolicy.window=soon",), "at '/failurePolicy/window': 'soon' does not match"),
        (("checkpoints.url=gs:/b/x",), "at '/checkpoints/url': 'gs:/b/x' does not match"),
        (("checkpoints.url=s3://A_B/x",), "at '/checkpoints/url': 's3://A_B/x' does not match"),
        (("checkpoints.url=file:///x",), "at '/checkpoints/url': 'not' failed"),
        (("checkpoints.credentialsSecret=A",), "at '/checkpoints/credentialsSecret': 'A' does"),
        (("checkpoints.s3.endpoint=rgw:8080",), "at '/checkpoints/s3/endpoint': 'rgw:8080' does"),
        (("checkpoints.s3.secret=x",), "additional properties 'secret' not allowed"),
    ],
)
def test_bad_trainer_values_are_one_clear_error(sets: tuple[str, ...], message: str) -> None:
    with pytest.raises(HelmFailed, match=message):
        template("edl-trainer", sets=sets, namespace="ml")


NAMESPACES = {"edl": ("edl-system", "edl"), "edl-trainer": ("ml", "digits")}


@pytest.mark.slow
@pytest.mark.parametrize("chart", sorted(NAMESPACES))
def test_the_namespace_is_left_to_helm_unless_the_chart_is_told_to_own_it(chart: str) -> None:
    namespace, release = NAMESPACES[chart]
    assert not kinds(template(chart, namespace=namespace, release=release), "Namespace")
    docs = template(chart, namespace=namespace, release=release, sets=("namespace.create=true",))
    ns = one(docs, "Namespace")
    assert ns["metadata"]["name"] == namespace
    labels = ns["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
    # helm uninstall leaves it, as it leaves a namespace made by --create-namespace
    assert ns["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    out = helm("lint", "--strict", str(CHARTS / chart), "--namespace", namespace,
               "--set", "namespace.create=true")  # fmt: skip
    assert "0 chart(s) failed" in out


@pytest.mark.slow
@pytest.mark.parametrize("chart", sorted(NAMESPACES))
def test_one_pod_security_level_can_be_changed_or_left_out(chart: str) -> None:
    namespace, release = NAMESPACES[chart]
    sets = ("namespace.create=true", "namespace.podSecurity.enforce=baseline",
            "namespace.podSecurity.audit=")  # fmt: skip
    labels = one(template(chart, namespace=namespace, release=release, sets=sets), "Namespace")[
        "metadata"
    ]["labels"]
    security = {k: v for k, v in labels.items() if k.startswith("pod-security.kubernetes.io/")}
    assert security == {
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/warn": "restricted",
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("chart", "namespace", "sets", "message"),
    [
        ("edl", "edl-system", ("namespace.podSecurity.warn=strict",),
         "at '/namespace/podSecurity/warn': value must be one of '', 'privileged'"),
        ("edl", "kube-system", (), 'will not own the namespace "kube-system"'),
        ("edl-trainer", "default", (), 'will not own the namespace "default"'),
    ],
)  # fmt: skip
def test_bad_namespace_values_are_one_clear_error(
    chart: str, namespace: str, sets: tuple[str, ...], message: str
) -> None:
    with pytest.raises(HelmFailed, match=message):
        template(chart, namespace=namespace, sets=("namespace.create=true", *sets))


@pytest.mark.slow
def test_the_least_privilege_table_lists_the_verbs_the_trainer_role_grants() -> None:
    """docs/helm.md's "Least privilege" rows, one per resource, say exactly the Role's verbs."""
    page = (ROOT / "docs" / "helm.md").read_text()
    after = page.split("### Least privilege", 1)[1]
    section = after[after.index("\n| rule ") + 1 :].split("\n\n", 1)[0]
    documented: dict[str, set[str]] = {}
    words = {"ConfigMap": ["configmaps"], "Leases": ["leases"], "Events": ["events"],
             "Deployment": ["deployments/scale"]}  # fmt: skip
    for row in section.splitlines()[2:]:
        rule = row.split("|")[1]
        verbs = set(re.findall(r"`([a-z]+)`", rule.split(":", 1)[1]))
        for resource in words[rule.split()[0].rstrip(":")]:
            documented[resource] = verbs
    role = one(template("edl-trainer", namespace="ml", release="digits"), "Role")
    granted = {r: set(rule["verbs"]) for rule in role["rules"] for r in rule["resources"]}
    assert documented == granted


@pytest.mark.slow
def test_with_kueue_the_chart_and_the_component_grant_the_same_reads_and_pass_the_flag(
    tmp_path: Path,
) -> None:
    (tmp_path / "kustomization.yaml").write_text(
        "resources: [{0}/manifests/base]\ncomponents: [{0}/manifests/components/kueue]\n".format(
            Path(os.path.relpath(ROOT, tmp_path)).as_posix()
        )
    )
    manifests = render(str(tmp_path))
    chart = template("edl", sets=("sizing.kueue=true",))

    def kueue_rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            r
            for d in kinds(docs, "ClusterRole")
            for r in d["rules"]
            if "kueue.x-k8s.io" in r["apiGroups"]
        ]

    assert (
        kueue_rules(manifests)
        == kueue_rules(chart)
        == [
            {
                "apiGroups": ["kueue.x-k8s.io"],
                "resources": ["clusterqueues", "localqueues", "workloads"],
                "verbs": ["list", "watch"],
            }
        ]
    )
    deployment = next(
        d for d in kinds(manifests, "Deployment") if "adapter" in d["metadata"]["name"]
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    from_manifests = settings_from_args(build_parser().parse_args(container["args"]), env={})
    assert from_manifests.sizing_kueue and adapter_settings(chart).sizing_kueue
    assert not adapter_settings(template("edl")).sizing_kueue
    assert not kueue_rules(template("edl"))
