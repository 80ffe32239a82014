"""The trainers' ValidatingAdmissionPolicy of manifests/base on the e2e control plane, and API
clients that speak with a ServiceAccount's real token.

The policy is cluster-scoped: `installed` creates it (and its binding) for one test and deletes
what it created afterwards. The API server enforces a new policy asynchronously, so a test waits
for a write the policy refuses (`enforced`) before it asserts anything.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import client

from tests.e2e.harness.bodies import as_body
from tests.e2e.harness.controlplane import ControlPlane
from tests.support.kustomize import render
from tests.support.waiting import wait_for

KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def policy_documents() -> list[dict[str, Any]]:
    """The policy and its binding, as `kubectl apply -k manifests/base` installs them."""
    return [d for d in render("manifests/base") if d["kind"] in KINDS]


@contextlib.contextmanager
def installed(api: client.ApiClient) -> Iterator[list[dict[str, Any]]]:
    """The policy and binding exist for the block (those it created are deleted after)."""
    admission = client.AdmissionregistrationV1Api(api)
    create: dict[str, Callable[..., object]] = {
        "ValidatingAdmissionPolicy": admission.create_validating_admission_policy,
        "ValidatingAdmissionPolicyBinding": admission.create_validating_admission_policy_binding,
    }
    delete: dict[str, Callable[..., object]] = {
        "ValidatingAdmissionPolicy": admission.delete_validating_admission_policy,
        "ValidatingAdmissionPolicyBinding": admission.delete_validating_admission_policy_binding,
    }
    docs = policy_documents()
    made: list[dict[str, Any]] = []
    try:
        for doc in docs:
            try:
                create[doc["kind"]](as_body(doc))
            except client.ApiException as e:
                if e.status != 409:
                    raise
                continue  # another test's, left as it is
            made.append(doc)
        yield docs
    finally:
        for doc in reversed(made):
            with contextlib.suppress(client.ApiException):
                delete[doc["kind"]](doc["metadata"]["name"])


def enforced(refused_write: Callable[[], object], timeout_s: float = 60.0) -> None:
    """Waits until `refused_write` (a dry-run write the policy must refuse) is refused."""

    def refused() -> bool:
        try:
            refused_write()
        except client.ApiException as e:
            return e.status == 403 and "edl-trainer-own-objects" in str(e.body)
        return False

    wait_for(refused, timeout_s=timeout_s, what="the trainer policy enforced", interval_s=0.5)


def token_client(cp: ControlPlane, token: str) -> client.ApiClient:
    """An API client of the control plane that authenticates with `token` only."""
    assert cp.pki is not None
    config = client.Configuration()
    config.host = cp.server
    config.ssl_ca_cert = str(cp.pki.ca.cert)
    config.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(config)
