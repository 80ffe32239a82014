"""Issue 25's path confusion, as it was found: through the real kube-apiserver.

A user allowed to read custom metrics only in namespace `<ns>-scratch` sends
`…/namespaces/<ns>-scratch/pods/a://h/apis/…/namespaces/<ns>/pods/<pod>/samples_per_second`.
kube-apiserver authorises it for the scratch namespace and forwards it as written; the
adapter used to re-read the origin-form path as an absolute URL and route it to `<ns>`, where
only its own SubjectAccessReview stopped it (and nothing stopped the cluster admin, who got
the other namespace's value through a path authorised as another). Now every variant is
answered for the path kube-apiserver authorised: a Status (400 or 404), never a MetricValueList,
for the limited user and for the admin alike, and the adapter's access log shows it served
exactly that path.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import requests
from kubernetes import client

from tests.e2e.harness.adapter import MetricsAdapter
from tests.e2e.harness.bodies import as_body
from tests.e2e.harness.controlplane import ControlPlane
from tests.e2e.harness.session import E2ENamespace
from tests.e2e.harness.workloads import create_trainer_job
from tests.support.pki import issue, load_issued
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

API = "/apis/custom.metrics.k8s.io/v1beta2"


def _scratch_reader(api: client.ApiClient, namespace: str, user: str) -> None:
    """`user` may read custom metrics in `namespace` and nowhere else."""
    rbac = client.RbacAuthorizationV1Api(api)
    rule: dict[str, Any] = {
        "apiGroups": ["custom.metrics.k8s.io"],
        "resources": ["*"],
        "verbs": ["get", "list"],
    }
    rbac.create_namespaced_role(
        namespace, as_body({"metadata": {"name": "metrics-reader"}, "rules": [rule]})
    )
    subject = {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
    rbac.create_namespaced_role_binding(
        namespace,
        as_body(
            {
                "metadata": {"name": "metrics-reader"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "metrics-reader",
                },
                "subjects": [subject],
            }
        ),
    )


def test_a_scheme_inside_the_path_is_answered_for_the_namespace_kube_apiserver_authorised(
    e2e_ns: E2ENamespace,
    metrics_adapter: MetricsAdapter,
    control_plane: ControlPlane,
    tmp_path: Path,
) -> None:
    ml = e2e_ns.name
    job = create_trainer_job(e2e_ns.api, ml, e2e_ns.load_dir, replicas=1, samples_per_second=40)
    wait_for(lambda: job.ready_replicas() == 1, timeout_s=90, what="a ready trainer pod")
    listed = f"{API}/namespaces/{ml}/pods/*/samples_per_second?labelSelector=app%3Dtrainer"
    items = wait_for(
        lambda: control_plane.request("GET", listed).json()["items"],
        timeout_s=90,
        what="the pod's samples_per_second through the aggregator",
    )
    pod = items[0]["describedObject"]["name"]
    own = f"{API}/namespaces/{ml}/pods/{pod}/samples_per_second"
    assert control_plane.request("GET", own).json()["kind"] == "MetricValueList"

    scratch = f"{ml}-scratch"
    core = client.CoreV1Api(e2e_ns.api)
    core.create_namespace(as_body({"metadata": {"name": scratch}}))
    try:
        user = f"scratch-{uuid.uuid4().hex[:6]}"
        _scratch_reader(e2e_ns.api, scratch, user)
        ca = load_issued(metrics_adapter.pki.ca.cert, metrics_adapter.pki.ca.key)
        pair = issue(ca, user)
        cert, key = tmp_path / "user.crt", tmp_path / "user.key"
        cert.write_bytes(pair.pem)
        key.write_bytes(pair.key_pem)
        ca_file = str(metrics_adapter.pki.ca.cert)

        def as_user(path: str) -> requests.Response:
            return requests.get(
                f"{control_plane.server}{path}",
                cert=(str(cert), str(key)),
                verify=ca_file,
                timeout=30,
            )

        # the user's rights, as kube-apiserver sees them (RBAC may take a moment)
        wait_for(
            lambda: (
                as_user(f"{API}/namespaces/{scratch}/pods/*/samples_per_second").status_code
                in (200, 404)
            ),
            timeout_s=30,
            what="the scratch user allowed in its namespace",
        )
        assert as_user(own).status_code == 403  # and refused in the other one

        variants = [
            f"{API}/namespaces/{scratch}/pods/a://h{own}",
            f"{API}/namespaces/{scratch}/pods/http://h{own}",
            f"{API}/namespaces/{scratch}/pods/a/https://h{own}",
            f"{API}/namespaces/{scratch}/pods/x/HTTPS://h{own}?x=1",
        ]
        answers = []
        for path in variants:
            for who, response in (
                ("user", as_user(path)),
                ("admin", control_plane.request("GET", path, ok=(200, 400, 403, 404))),
            ):
                body = response.json()
                answers.append((who, path, response.status_code, body.get("kind")))
                assert body.get("kind") == "Status", (who, path, response.text[:300])
                assert response.status_code in (400, 404), (who, path, response.text[:300])
        print(f"\nconfused paths through kube-apiserver: {answers}")

        # each variant reached the adapter (not refused by kube-apiserver itself) as written
        def logged() -> bool:
            log = metrics_adapter.process.tail(4000)
            return all(f"GET {path} HTTP/1.1" in log for path in variants)

        wait_for(logged, timeout_s=30, what="every variant in the adapter's access log")
    finally:
        core.delete_namespace(scratch)
