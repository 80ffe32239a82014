"""A trainer's real ServiceAccount token may write its own job's objects, and nothing else.

On the real kube-apiserver: the ServiceAccount, Role and RoleBinding of
manifests/examples/digits-trainer and the ValidatingAdmissionPolicy of manifests/base, as a user
installs them. A compromised trainer (its pod-bound token, as a pod holds it) tries what issue 37
found it could do; each write is refused and changes nothing. The agents' own writes, made by
the agent's own code with the same token, succeed: its Lease, a stale Lease of its job, the world
ConfigMap (created, then marked finished), the Event and the scale subresource to 0.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from agent.elastic.finished_job import ClientDeploymentApi, DeploymentRetirement
from agent.elastic.kubernetes_store import (
    FINISHED,
    FINISHED_STEP,
    LABEL_JOB,
    STATE_LABEL,
    ClientApi,
    KubernetesStore,
)
from agent.elastic.world import Member, World
from tests.e2e.harness import trainer_policy
from tests.e2e.harness.bodies import as_body
from tests.e2e.harness.controlplane import ControlPlane
from tests.e2e.harness.incluster import example_objects
from tests.e2e.harness.session import E2ENamespace, Kubectl
from tests.e2e.harness.workloads import create_trainer_job
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(240)

JOB = "digits"
DEPLOYMENT = "digits-trainer"
SERVICE_ACCOUNT = "edl-trainer"


def lease(name: str, job: str, holder: str = "someone") -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "labels": {LABEL_JOB: job}},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    }


def refused(write: Callable[[], object], because: str) -> str:
    """The API server's 403 for `write`; its message must contain `because`."""
    with pytest.raises(client.ApiException) as e:
        write()
    assert e.value.status == 403, e.value.body
    message = str(json.loads(str(e.value.body)).get("message", ""))
    assert because in message, message
    return message


def test_a_trainer_token_writes_only_its_own_jobs_objects(
    e2e_ns: E2ENamespace, kubectl: Kubectl, control_plane: ControlPlane, tmp_path: Path
) -> None:
    ns, admin = e2e_ns.name, e2e_ns.api
    core, apps = client.CoreV1Api(admin), client.AppsV1Api(admin)
    coord = client.CoordinationV1Api(admin)
    rbac = client.RbacAuthorizationV1Api(admin)
    for doc in example_objects(ns):
        create = {
            "ServiceAccount": lambda d: core.create_namespaced_service_account(ns, as_body(d)),
            "Role": lambda d: rbac.create_namespaced_role(ns, as_body(d)),
            "RoleBinding": lambda d: rbac.create_namespaced_role_binding(ns, as_body(d)),
        }[doc["kind"]]
        create(doc)
    create_trainer_job(admin, ns, e2e_ns.load_dir, name=DEPLOYMENT, replicas=2,
                       service_account=SERVICE_ACCOUNT)  # fmt: skip
    coord.create_namespaced_lease(ns, as_body(lease("edl-other-pod-1", "other")))
    coord.create_namespaced_lease(ns, as_body(lease("edl-digits-gone-pod", JOB)))
    pod = wait_for(
        lambda: next(iter(core.list_namespaced_pod(ns).items), None),
        timeout_s=60,
        what="a pod of the Deployment",
    )
    pod_name, pod_uid = str(pod.metadata.name), str(pod.metadata.uid)
    token = kubectl(
        "create", "token", SERVICE_ACCOUNT, "-n", ns, "--duration=1h",
        "--bound-object-kind=Pod", f"--bound-object-name={pod_name}",
        f"--bound-object-uid={pod_uid}",
    ).strip()  # fmt: skip
    trainer = trainer_policy.token_client(control_plane, token)
    t_core, t_apps = client.CoreV1Api(trainer), client.AppsV1Api(trainer)
    t_coord = client.CoordinationV1Api(trainer)

    with trainer_policy.installed(admin):
        probe = {"metadata": {"name": "edl-policy-probe"}}
        trainer_policy.enforced(
            lambda: t_core.create_namespaced_config_map(ns, as_body(probe), dry_run="All")
        )

        # -- what a compromised trainer tried (issue 37): every write refused ---------------
        template = {"spec": {"template": {"spec": {"serviceAccountName": "default"}}}}
        refused(lambda: t_apps.patch_namespaced_deployment(DEPLOYMENT, ns, template),
                "cannot patch resource \"deployments\"")  # fmt: skip
        refused(lambda: t_apps.patch_namespaced_deployment(
            DEPLOYMENT, ns, {"spec": {"replicas": 1000}}), "cannot patch resource")  # fmt: skip
        refused(lambda: t_apps.patch_namespaced_deployment_scale(
            DEPLOYMENT, ns, {"spec": {"replicas": 1000}}),
            "may only scale its Deployment to 0, not to 1000")  # fmt: skip
        refused(lambda: t_coord.create_namespaced_lease(ns, as_body(lease("edl-other-x", "other"))),
                "may write only Leases edl-digits-*")  # fmt: skip
        refused(lambda: t_coord.create_namespaced_lease(ns, as_body(lease("edl-other-x", JOB))),
                "not edl-other-x")  # another job's name, though labelled ours  # fmt: skip
        refused(lambda: t_coord.patch_namespaced_lease(
            "edl-other-pod-1", ns, {"spec": {"holderIdentity": "me"}}),
            "may write only Leases edl-digits-*")  # fmt: skip
        refused(lambda: t_coord.patch_namespaced_lease(
            "edl-other-pod-1", ns, {"metadata": {"labels": {LABEL_JOB: JOB}}}),
            "may write only Leases edl-digits-*")  # relabelling it ours  # fmt: skip
        refused(lambda: t_coord.delete_namespaced_lease("edl-other-pod-1", ns),
                "may write only Leases edl-digits-*")  # fmt: skip
        refused(lambda: t_coord.create_namespaced_lease(
            ns, as_body(lease("edl-digits-another-pod", JOB))),
            f"pod {pod_name} may create and renew only its own Lease")  # fmt: skip
        refused(lambda: t_core.create_namespaced_config_map(
            ns, as_body({"metadata": {"name": "pwned"}, "data": {"x": "y"}})),
            "may write only its ConfigMap edl-digits-world")  # fmt: skip

        # nothing changed
        other = coord.read_namespaced_lease("edl-other-pod-1", ns)
        assert other.spec.holder_identity == "someone"
        assert (other.metadata.labels or {}).get(LABEL_JOB) == "other"
        d = apps.read_namespaced_deployment(DEPLOYMENT, ns)
        assert d.spec.replicas == 2 and d.spec.template.spec.service_account_name == SERVICE_ACCOUNT
        assert "pwned" not in {c.metadata.name for c in core.list_namespaced_config_map(ns).items}

        # -- what the agents do, with the agent's own code and the same token: allowed ------
        owner = {"apiVersion": "v1", "kind": "Pod", "name": pod_name,
                 "uid": pod_uid}  # fmt: skip
        api = ClientApi(t_core, t_coord, ns, client.ApiException, owner)
        store = KubernetesStore(api, JOB)
        me = Member(joined=1, id=pod_name, incarnation="i", host="10.0.0.1",
                    ports=(29543, 29544))  # fmt: skip
        store.beat(me)  # creates its Lease
        store.beat(me)  # renews it
        assert [h.member.id for h in store.heartbeats()] == [pod_name]
        store.remove(Member(joined=0, id="gone-pod", incarnation="i", host="10.0.0.2",
                            ports=(29543, 29544)))  # a stale member of its job  # fmt: skip
        names = {x.metadata.name for x in coord.list_namespaced_lease(ns).items}
        assert names == {"edl-other-pod-1", f"edl-digits-{pod_name}"}
        world = World(1, (me,))
        assert store.write_world(world.to_json(writer=me.key), "")  # creates the world
        version = store.read_world().version
        assert store.write_world(world.finish(230).to_json(writer=me.key), version)
        cm = core.read_namespaced_config_map(f"edl-{JOB}-world", ns)
        assert (cm.metadata.labels or {}).get(STATE_LABEL) == FINISHED
        assert (cm.metadata.annotations or {}).get(FINISHED_STEP) == "230"
        shown = kubectl("-n", ns, "get", "cm", f"edl-{JOB}-world", "-L", STATE_LABEL)
        assert FINISHED in shown, shown

        retirement = DeploymentRetirement(
            ClientDeploymentApi(t_apps, t_core, ns, client.ApiException), DEPLOYMENT, JOB
        )
        assert retirement.retire(230) is True  # the Event, then the scale subresource to 0
        assert retirement.retire(230) is False  # the second agent records no second Event
        assert apps.read_namespaced_deployment(DEPLOYMENT, ns).spec.replicas == 0
        events = [e for e in core.list_namespaced_event(ns).items if e.reason == "JobFinished"]
        assert len(events) == 1 and events[0].involved_object.uid == d.metadata.uid
