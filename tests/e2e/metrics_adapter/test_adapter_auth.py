"""The adapter's delegated authn/authz against the real kube-apiserver (TokenReview, SAR)."""

from __future__ import annotations

import pytest
import requests
from kubernetes import client

from tests.e2e.harness.adapter import MetricsAdapter
from tests.e2e.harness.bodies import as_body
from tests.e2e.harness.session import E2ENamespace, Kubectl
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(180)


def test_direct_callers_are_authenticated_and_authorised_by_the_cluster(
    e2e_ns: E2ENamespace, metrics_adapter: MetricsAdapter, kubectl: Kubectl
) -> None:
    ns = e2e_ns.name
    ca = str(metrics_adapter.pki.ca.cert)
    url = (
        f"{metrics_adapter.url}/apis/custom.metrics.k8s.io/v1beta2/namespaces/{ns}"
        "/pods/*/samples_per_second?labelSelector=app%3Dtrainer"
    )

    # Nobody: no client certificate, no token.
    anonymous = requests.get(url, verify=ca, timeout=10)
    assert anonymous.status_code in (401, 403), anonymous.text
    assert anonymous.json()["kind"] == "Status"

    # A service account token (issued by the real apiserver) is checked with TokenReview...
    core = client.CoreV1Api(e2e_ns.api)
    core.create_namespaced_service_account(ns, as_body({"metadata": {"name": "metrics-reader"}}))
    token = kubectl("create", "token", "metrics-reader", "-n", ns, "--duration=10m").strip()
    headers = {"Authorization": f"Bearer {token}"}
    denied = requests.get(url, verify=ca, headers=headers, timeout=10)
    # ...and, without RBAC, refused by SubjectAccessReview.
    assert denied.status_code == 403, denied.text
    assert denied.json()["reason"] == "Forbidden"

    # Grant it read access to the custom metrics API: the same token is now allowed.
    rbac = client.RbacAuthorizationV1Api(e2e_ns.api)
    rbac.create_namespaced_role(
        ns,
        as_body(
            {
                "metadata": {"name": "custom-metrics-reader"},
                "rules": [
                    {"apiGroups": ["custom.metrics.k8s.io"], "resources": ["*"], "verbs": ["get"]}
                ],
            }
        ),
    )
    rbac.create_namespaced_role_binding(
        ns,
        as_body(
            {
                "metadata": {"name": "custom-metrics-reader"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "custom-metrics-reader",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "metrics-reader", "namespace": ns}],
            }
        ),
    )
    # Denials may be cached briefly (--auth-cache-ttl); wait past that, bounded.
    allowed = wait_for(
        lambda: r if (r := requests.get(url, verify=ca, headers=headers, timeout=10)).ok else None,
        timeout_s=60,
        what="the token allowed after the RoleBinding",
    )
    assert allowed.json()["kind"] == "MetricValueList"
