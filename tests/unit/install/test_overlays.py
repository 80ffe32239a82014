"""The install overlays: what each one leaves out, rendered with `kubectl kustomize`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from metrics_adapter.cli import build_parser, settings_from_args
from metrics_adapter.settings import AdapterSettings, AuthMode
from tests.support.kustomize import ROOT, render


def names(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(d["kind"], d["metadata"]["name"]) for d in docs}


@pytest.mark.slow
def test_custom_only_is_the_base_without_the_external_apiservice() -> None:
    base, custom = render("manifests/base"), render("manifests/overlays/custom-only")
    assert names(base) - names(custom) == {("APIService", "v1beta1.external.metrics.k8s.io")}
    assert names(custom) <= names(base)
    groups = {d["spec"]["group"] for d in custom if d["kind"] == "APIService"}
    assert groups == {"custom.metrics.k8s.io"}


@pytest.mark.slow
@pytest.mark.parametrize("under", ["manifests/base", "manifests/overlays/custom-only"])
def test_the_verified_tls_component_makes_every_apiservice_verify_the_adapter(
    tmp_path: Path, under: str
) -> None:
    """The base alone skips verification (a dev cluster's); the component, on any
    kustomization built on it, trusts cert-manager's CA instead (docs/install.md)."""
    assert all(
        d["spec"]["insecureSkipTLSVerify"] is True
        for d in render(under)
        if d["kind"] == "APIService"
    )
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump({
            "resources": [os.path.relpath(ROOT / under, tmp_path)],  # kustomize: relative
            "components": [os.path.relpath(ROOT / "manifests/components/verified-tls", tmp_path)],
        })
    )  # fmt: skip
    docs = render(str(tmp_path))
    apis = [d for d in docs if d["kind"] == "APIService"]
    assert {a["metadata"]["name"] for a in apis} == {
        a["metadata"]["name"] for a in render(under) if a["kind"] == "APIService"
    }
    for api in apis:
        assert "insecureSkipTLSVerify" not in api["spec"]
        assert api["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": "edl-system/edl-metrics-adapter"
        }
    (certificate,) = [d for d in docs if d["kind"] == "Certificate"]
    (service,) = [d for d in docs if d["kind"] == "Service"]
    host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert host in certificate["spec"]["dnsNames"]
    settings = adapter_settings(docs)
    assert settings is not None and settings.tls_cert_file == Path("/var/run/serving-cert/tls.crt")
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    volumes = {v["name"]: v for v in deploy["spec"]["template"]["spec"]["volumes"]}
    assert volumes["serving-cert"] == {
        "name": "serving-cert",
        "secret": {"secretName": certificate["spec"]["secretName"]},
    }


@pytest.mark.slow
def test_prometheus_adapter_overlay_installs_only_the_rules() -> None:
    docs = render("manifests/overlays/prometheus-adapter")
    (cm,) = docs
    assert (cm["kind"], cm["metadata"]["namespace"]) == ("ConfigMap", "monitoring")
    rules = ROOT / "manifests/overlays/prometheus-adapter/rules.yaml"
    assert cm["data"] == {"config.yaml": rules.read_text()}
    config = yaml.safe_load(cm["data"]["config.yaml"])
    for rule in config["rules"] + config["externalRules"]:
        assert set(rule) == {"seriesQuery", "resources", "name", "metricsQuery"}, rule


def test_every_path_the_containerfile_copies_is_in_the_build_context() -> None:
    """.dockerignore is an allowlist: a COPY of a path it leaves out fails only at build time."""
    containerfile = (ROOT / "images/Containerfile").read_text()
    allowed = [
        line[1:].rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    ]
    copied = []
    for line in containerfile.splitlines():
        parts = line.split()
        if parts[:1] == ["COPY"] and not any(p.startswith("--from") for p in parts):
            copied += parts[1:-1]
    assert copied
    for source in copied:
        assert (ROOT / source).exists(), source
        assert any(source == a or source.startswith(f"{a}/") for a in allowed), source


@pytest.mark.slow
def test_the_example_trainer_runs_non_root_with_a_read_only_root() -> None:
    (deploy,) = [
        d for d in render("manifests/examples/digits-trainer") if d["kind"] == "Deployment"
    ]
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/tmp" in mounts  # Paddle and the agent need a writable temp dir
    containerfile = Path(ROOT / "images/Containerfile").read_text()
    finals = ("adapter", "trainer", "trainer-torch")  # every image's stage sets the user
    for final in finals:
        stage = containerfile.split(f" AS {final}\n", 1)[1].split("\nFROM ", 1)[0]
        assert "\nUSER 65532:65532\n" in stage, final


def adapter_settings(docs: list[dict[str, Any]]) -> AdapterSettings | None:
    """The settings the adapter container's arguments give, parsed by the adapter itself."""
    for d in docs:
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "edl-metrics-adapter":
            (container,) = d["spec"]["template"]["spec"]["containers"]
            args = build_parser().parse_args(container["args"])
            return settings_from_args(args, env={})
    return None


def example_hpa_metrics() -> set[str]:
    docs = render("manifests/examples/digits-trainer")
    return {
        m[m["type"].lower()]["metric"]["name"]
        for d in docs
        if d["kind"] == "HorizontalPodAutoscaler"
        for m in d["spec"]["metrics"]
    }


ADAPTER_KUSTOMIZATIONS = ["manifests/base"] + [
    f"manifests/overlays/{p.name}"
    for p in sorted((ROOT / "manifests/overlays").iterdir())
    if p.name != "prometheus-adapter"  # installs no EDL adapter (tested above)
]


@pytest.mark.slow
@pytest.mark.parametrize("kustomization", ADAPTER_KUSTOMIZATIONS)
def test_every_overlay_keeps_what_the_example_hpa_reads(kustomization: str) -> None:
    settings = adapter_settings(render(kustomization))
    assert settings is not None, f"{kustomization} renders no edl-metrics-adapter Deployment"
    assert "desired_replicas" in example_hpa_metrics()
    assert settings.sizing is True  # desired_replicas is served by the sizer only
    assert settings.authentication == settings.authorization == AuthMode.DELEGATED
    assert settings.metrics_config == Path("/etc/edl-adapter/catalogue.yaml")


@pytest.mark.slow
def test_production_patches_the_arguments_it_changes_and_keeps_the_rest() -> None:
    base = adapter_settings(render("manifests/base"))
    production = adapter_settings(render("manifests/overlays/production"))
    assert base is not None and production is not None
    assert (production.pod_selector, production.namespace) == ("app=trainer", "ml")
    assert production.scrape_interval == 2.0
    assert production.tls_cert_file == Path("/var/run/serving-cert/tls.crt")
    changed = {"pod_selector", "namespace", "scrape_interval", "tls_cert_file",
               "tls_private_key_file"}  # fmt: skip
    same = {
        k for k in vars(base) if k not in changed and getattr(base, k) == getattr(production, k)
    }
    assert same == set(vars(base)) - changed
