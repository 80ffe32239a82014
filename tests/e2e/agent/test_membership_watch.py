"""The Kubernetes membership store's watch against a real kube-apiserver (issues 27 and 38).

The coordinator's `KubernetesStore.watch()` must wake it when another member's Lease appears
or is deleted, or the world ConfigMap is replaced, and not for a renewal; a follower's
(`watch(members=False)`) only for a new world (issue 38: the Leases reach one member). The
figures (write -> wake, through the API server's watch) are printed, never asserted. Then two
agents' `Membership`s: one coordinates, and the other takes over once it falls silent.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from agent.elastic.kubernetes_store import ClientApi, KubernetesStore
from agent.elastic.membership import Membership, MembershipSettings
from agent.elastic.store import StoreWatch
from agent.elastic.world import Member, World
from tests.e2e.harness.bodies import as_body

pytestmark = [pytest.mark.e2e]

WAKE_BOUND = 30.0
"""Seconds a wait may take before the test fails (a bound, not a measure of speed)."""
QUIET = 3.0
"""How long a renewal is watched for a wake that must not come."""


@pytest.fixture
def namespace(kube_api: client.ApiClient) -> Iterator[str]:
    core = client.CoreV1Api(kube_api)
    name = f"watch-{uuid.uuid4().hex[:6]}"
    core.create_namespace(as_body({"metadata": {"name": name, "labels": {"edl.e2e/test": "true"}}}))
    try:
        yield name
    finally:
        core.delete_namespace(name, propagation_policy="Background")


def store(kube_api: client.ApiClient, namespace: str) -> KubernetesStore:
    api = ClientApi(
        client.CoreV1Api(kube_api),
        client.CoordinationV1Api(kube_api),
        namespace,
        client.ApiException,
    )
    return KubernetesStore(api, "digits")


def woke(watch: StoreWatch, since: float) -> float:
    assert watch.wait(WAKE_BOUND), "the watch never woke"
    return time.monotonic() - since


def test_a_join_a_new_world_and_a_leave_wake_the_agent_a_renewal_does_not(
    kube_api: client.ApiClient, namespace: str
) -> None:
    a = Member(1.0, "a", "1", "10.0.0.1", (1, 2))
    b = Member(2.0, "b", "2", "10.0.0.2", (1, 2))
    mine, theirs = store(kube_api, namespace), store(kube_api, namespace)
    mine.beat(a)
    watch = mine.watch()
    try:
        assert watch.wait(WAKE_BOUND)  # the stream opens with what exists: learnt once
        while watch.wait(1.0):
            pass  # both streams' opening replays are drained
        t = time.monotonic()
        theirs.beat(b)
        joined = woke(watch, t)
        t = time.monotonic()
        assert theirs.write_world(World(1, (a, b)).to_json(), theirs.read_world().version)
        world = woke(watch, t)
        theirs.beat(b)  # a renewal
        assert not watch.wait(QUIET), "a renewal woke the agent"
        t = time.monotonic()
        theirs.remove(b)
        left = woke(watch, t)
        print(f"write -> wake: join {joined * 1000:.0f} ms, world {world * 1000:.0f} ms, "
              f"leave {left * 1000:.0f} ms")  # fmt: skip
    finally:
        watch.close()


def test_a_followers_watch_wakes_for_a_new_world_not_for_a_join_or_a_status(
    kube_api: client.ApiClient, namespace: str
) -> None:
    a = Member(1.0, "a", "1", "10.0.0.1", (1, 2))
    b = Member(2.0, "b", "2", "10.0.0.2", (1, 2))
    mine, theirs = store(kube_api, namespace), store(kube_api, namespace)
    mine.beat(a)
    assert theirs.write_world(World(1, (a,)).to_json(), "")
    watch = mine.watch(members=False)
    try:
        assert watch.wait(WAKE_BOUND)  # the world's opening replay
        while watch.wait(1.0):
            pass
        theirs.beat(b)  # a join: the coordinator's business
        assert not watch.wait(QUIET), "a join woke a follower"
        assert theirs.write_status({"edl.paddlepaddle.org/e2e-step": "7"})
        assert not watch.wait(QUIET), "rank 0's status report woke a follower"
        t = time.monotonic()
        assert theirs.write_world(World(2, (a, b)).to_json(), theirs.read_world().version)
        print(f"write -> follower's wake: world {woke(watch, t) * 1000:.0f} ms")
    finally:
        watch.close()


def test_a_silent_coordinator_is_replaced_by_a_follower(
    kube_api: client.ApiClient, namespace: str
) -> None:
    settings = MembershipSettings(heartbeat_interval=0.5, ttl=2.0, debounce=0.2)
    a = Membership(store(kube_api, namespace), Member(1.0, "a", "1", "10.0.0.1", (1, 2)), settings)
    b = Membership(store(kube_api, namespace), Member(2.0, "b", "2", "10.0.0.2", (1, 2)), settings)
    a.join()
    a.tick()  # names itself the coordinator: no one was
    assert a.coordinating
    b.join()

    def ticks(agents: list[Membership], until: Callable[[], bool]) -> None:
        deadline = time.monotonic() + WAKE_BOUND
        while not until():
            assert time.monotonic() < deadline, "not within the bound"
            for agent in agents:
                agent.wait_for_change(0.05)
                agent.tick()

    try:
        ticks([a, b], lambda: b.world is not None and b.world.size == 2)
        assert a.coordinating and not b.coordinating
        silent = time.monotonic()
        ticks([b], lambda: b.coordinating and b.world is not None and b.world.size == 1)
        print(f"coordinator silent -> the follower's world without it: "
              f"{time.monotonic() - silent:.1f} s (TTL {settings.ttl:g} s)")  # fmt: skip
    finally:
        a.close()
        b.close()
