from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from agent.elastic.errors import StoreUnavailable
from agent.elastic.failures import FailurePolicy, TrainerFailure
from agent.elastic.job_status import PHASE_KEY, PREFIX, JobPhase, JobStatus
from agent.elastic.kubernetes_store import (
    ANNOTATION_MEMBER,
    FAILED,
    FINISHED,
    FINISHED_STEP,
    FINISHED_TIME,
    LABEL_JOB,
    LAST_FAILURE,
    STATE_LABEL,
    ClientApi,
    KubernetesStore,
    dns_name,
    micro_time,
    parse_micro_time,
    pod_owner,
)
from agent.elastic.membership import Membership, MembershipSettings
from agent.elastic.world import Member, World
from tests.unit.agent.elastic.helpers import Clock, FakeApi

SETTINGS = MembershipSettings(
    max_size=3, heartbeat_interval=1.0, ttl=5.0, debounce=1.0, max_debounce=4.0
)


def agents(api: FakeApi, clock: Clock, names: str) -> dict[str, Membership]:
    out = {}
    for i, name in enumerate(names):
        host = f"10.0.0.{i + 1}"
        me = Member(joined=i, id=f"pod-{name}", incarnation="x", host=host, ports=(36543, 36544))
        store = KubernetesStore(api, "Digits_Job", clock=clock.wall)
        out[name] = Membership(
            store, me, SETTINGS, clock=clock, wall_clock=lambda: clock.wall().timestamp()
        )
        out[name].join()
    return out


def run(members: dict[str, Membership], clock: Clock, seconds: float) -> None:
    for _ in range(round(seconds / 0.2)):
        clock.now += 0.2
        for m in members.values():
            m.tick()


def test_agreement_over_leases_and_a_config_map() -> None:
    api, clock = FakeApi(), Clock()
    members = agents(api, clock, "abc")
    run(members, clock, 2)
    world = members["c"].world
    assert world is not None and [m.id for m in world.members] == ["pod-a", "pod-b", "pod-c"]
    assert world.master == "10.0.0.1:36544"  # generation 1 uses the second port
    assert set(api.leases) == {f"edl-digits-job-pod-{n}" for n in "abc"}
    assert World.from_json(api.config_maps["edl-digits-job-world"][0]["world"]) == world

    members.pop("a").leave()  # pod deleted: SIGTERM -> lease deleted
    run(members, clock, 2)
    assert [m.id for m in members["b"].world.members] == ["pod-b", "pod-c"]  # type: ignore[union-attr]

    members.pop("c")  # pod lost: its lease stops being renewed
    run(members, clock, 4)
    assert members["b"].world.size == 2  # type: ignore[union-attr]
    run(members, clock, 4)
    assert members["b"].world.size == 1  # type: ignore[union-attr]


def test_config_map_emptied_by_hand_is_repaired(caplog: pytest.LogCaptureFixture) -> None:
    api, clock = FakeApi(), Clock()
    members = agents(api, clock, "ab")
    run(members, clock, 2)
    _, version = api.config_maps["edl-digits-job-world"]
    api.config_maps["edl-digits-job-world"] = ({"other": "x"}, version + "0")
    with caplog.at_level(logging.WARNING):
        run(members, clock, 0.4)
    assert sum("world record invalid" in r.getMessage() for r in caplog.records) == 1
    world = World.from_json(api.config_maps["edl-digits-job-world"][0]["world"])
    assert world.generation == 2 and world.size == 2


def test_api_outage_keeps_the_world() -> None:
    api, clock = FakeApi(), Clock()
    members = agents(api, clock, "ab")
    run(members, clock, 2)
    before = members["a"].world
    api.down = True
    run(members, clock, 60)
    api.down = False
    run(members, clock, 3)
    assert members["a"].world == before == members["b"].world


def test_names_and_times() -> None:
    assert dns_name("edl", "My_Job", "pod.1") == "edl-my-job-pod-1"
    when = datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
    assert micro_time(when) == "2026-05-01T12:00:00.123456Z"
    assert parse_micro_time(micro_time(when)) == when.timestamp()
    assert parse_micro_time("nonsense") == 0.0


class ApiException(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status, self.reason = status, "x"


class Obj:
    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


class FakeCore:
    def __init__(self, status: int | None) -> None:
        self.status = status

    def read_namespaced_config_map(self, name: str, ns: str) -> Any:
        if self.status:
            raise ApiException(self.status)
        return Obj(data={"world": "{}"}, metadata=Obj(resource_version="7"))

    def replace_namespaced_config_map(self, name: str, ns: str, body: Any) -> Any:
        if self.status:
            raise ApiException(self.status)
        return body


class FakeCoordination:
    def __init__(self) -> None:
        self.created: list[Any] = []

    def patch_namespaced_lease(self, name: str, ns: str, body: Any) -> Any:
        raise ApiException(404)

    def create_namespaced_lease(self, ns: str, body: Any) -> Any:
        self.created.append(body)
        return body

    def list_namespaced_lease(self, ns: str, label_selector: str) -> Any:
        spec = Obj(renew_time=datetime(2026, 1, 1, tzinfo=UTC), holder_identity="a/x")
        meta = Obj(name="edl-j-a", annotations={ANNOTATION_MEMBER: "{}"})
        return Obj(items=[Obj(spec=spec, metadata=meta)])


def test_client_api_maps_statuses() -> None:
    coord = FakeCoordination()
    ok = ClientApi(FakeCore(None), coord, "ns", ApiException)
    assert ok.get_config_map("w") == ({"world": "{}"}, "7", {})
    assert ok.replace_config_map("w", {}, "7", {}, {}) is True
    assert ClientApi(FakeCore(404), coord, "ns", ApiException).get_config_map("w") is None
    conflict = ClientApi(FakeCore(409), coord, "ns", ApiException)
    assert conflict.replace_config_map("w", {}, "1", {}, {}) is False
    with pytest.raises(StoreUnavailable, match="HTTP 503"):
        ClientApi(FakeCore(503), coord, "ns", ApiException).get_config_map("w")
    ok.renew_lease("l", "a/x", "t", {}, {})
    assert coord.created and coord.created[0]["spec"]["holderIdentity"] == "a/x"
    leases = ok.list_leases("k=v")
    assert leases[0]["renew_time"] == "2026-01-01T00:00:00.000000Z"


def test_a_members_lease_is_owned_by_its_pod_so_it_goes_with_the_pod() -> None:
    """`helm uninstall` removes the Role with the pods: the agent cannot delete its Lease then,
    the garbage collector does (its owner, the pod, is gone)."""
    assert pod_owner({"POD_NAME": "p-1"}) is None  # outside a pod: no owner
    owner = pod_owner({"POD_NAME": "p-1", "POD_UID": "u-9"})
    assert owner == {"apiVersion": "v1", "kind": "Pod", "name": "p-1", "uid": "u-9"}
    coord = FakeCoordination()
    ClientApi(FakeCore(None), coord, "ns", ApiException, owner).renew_lease("l", "a/x", "t", {}, {})
    assert coord.created[0]["metadata"]["ownerReferences"] == [owner]


def test_the_world_config_map_says_finished_when_its_record_does() -> None:
    """The finished state is the job's own object's (the agents need no write access to their
    Deployment): `kubectl get cm -L edl.paddlepaddle.org/state` shows it."""
    api, clock = FakeApi(), Clock()
    members = agents(api, clock, "ab")
    run(members, clock, 2)
    labels, annotations = api.meta["edl-digits-job-world"]
    assert labels == {LABEL_JOB: "digits-job"} and annotations == {}
    assert members["a"].finish(184)
    labels, annotations = api.meta["edl-digits-job-world"]
    assert labels == {LABEL_JOB: "digits-job", STATE_LABEL: FINISHED, PHASE_KEY: "Succeeded"}
    assert annotations == {
        FINISHED_STEP: "184",
        FINISHED_TIME: "2026-01-01T00:16:42Z",
        PHASE_KEY: "Succeeded",
    }
    world = World.from_json(api.config_maps["edl-digits-job-world"][0]["world"])
    assert world.finished and world.finished_at_step == 184


def test_the_world_config_map_says_failed_and_names_the_last_failure() -> None:
    """`kubectl get cm -L edl.paddlepaddle.org/state` shows ``failed`` once the failures of the
    job's members exceed its budget, and the newest failure in an annotation before that."""
    api, clock = FakeApi(), Clock()
    members = agents(api, clock, "ab")
    run(members, clock, 2)
    policy = FailurePolicy(budget=1, window=600)
    crash = TrainerFailure("a", 1, 100.0, ("ValueError: boom",))
    assert members["a"].record_failure(crash, policy) is not None
    labels, annotations = api.meta["edl-digits-job-world"]
    assert STATE_LABEL not in labels
    assert annotations == {LAST_FAILURE: "a status 1: ValueError: boom"}
    killed = TrainerFailure("b", 137, 101.0, ("Killed",))
    world = members["b"].record_failure(killed, policy)
    assert world is not None and world.failed
    labels, annotations = api.meta["edl-digits-job-world"]
    assert labels[STATE_LABEL] == FAILED and annotations[LAST_FAILURE] == "b status 137: Killed"


def test_the_status_lives_on_the_world_config_map_and_survives_world_writes() -> None:
    """`kubectl get cm -L edl.paddlepaddle.org/phase` and the status annotations: written by
    rank 0 beside the record (nothing else changes), kept when the next world is written."""
    api, clock = FakeApi(), Clock()
    members = agents(api, clock, "ab")
    run(members, clock, 2)
    before = api.config_maps["edl-digits-job-world"][0]
    status = JobStatus(JobPhase.RUNNING, 2, 1, global_step=40, progress=0.25, eta_seconds=90)
    assert members["a"].report_status(status.fields(0.0))
    data, _ = api.config_maps["edl-digits-job-world"]
    labels, annotations = api.meta["edl-digits-job-world"]
    assert data == before and labels[PHASE_KEY] == "Running"
    assert annotations[PREFIX + "progress"] == "25.0%" and annotations[PREFIX + "eta"] == "1m30s"
    members.pop("b").leave()  # a new world: the status is carried over, not lost
    run(members, clock, 2)
    assert World.from_json(api.config_maps["edl-digits-job-world"][0]["world"]).size == 1
    labels, annotations = api.meta["edl-digits-job-world"]
    assert labels[PHASE_KEY] == "Running" and annotations[PREFIX + "global-step"] == "40"
    assert members["a"].finish(80)  # the end says so, whatever the last report said
    labels, annotations = api.meta["edl-digits-job-world"]
    assert labels[PHASE_KEY] == annotations[PHASE_KEY] == "Succeeded"
    # no running figure beside Succeeded: what the end says, "-" until the last report
    assert annotations[PREFIX + "progress"] == "-" and annotations[PREFIX + "eta"] == "0s"
    assert annotations[PREFIX + "global-step"] == "80"
    last = JobStatus(JobPhase.SUCCEEDED, 0, 2, global_step=80, progress=1.0, eta_seconds=0)
    assert members["a"].report_status(last.fields(0.0))
    store = KubernetesStore(api, "Digits_Job", clock=clock.wall)
    record = store.read_world()  # the finished record written again: the last report stays
    assert record.text is not None and store.write_world(record.text, record.version)
    labels, annotations = api.meta["edl-digits-job-world"]
    assert annotations[PHASE_KEY] == "Succeeded" and annotations[PREFIX + "progress"] == "100.0%"
    api.down = True
    assert not members["a"].report_status(status.fields(0.0))  # unreachable: False, no raise
