"""One job's membership on the Kubernetes backend, before and after issue 38, at 100 / 500 / 1,000.

The agent's own classes as a library (`agent.elastic.kubernetes_store.KubernetesStore` over
`ClientApi`, `Membership`, `KubernetesWatch`: read, never changed here), against the bench's
real kube-apiserver and etcd, in two modes (``--membership-modes``):

* **before** (`KubernetesStore(coordinated=False)`, the settings of before: renewals every
  1 s, TTL 10 s): every member renews its Lease every ``EDL_HEARTBEAT_INTERVAL``, watches every
  Lease of the job and the world ConfigMap, and every ``EDL_POLL_INTERVAL`` (0.2 s) lists every
  Lease and reads the world (``Membership.tick``);
* **after** (the defaults: renewals every 5 s, TTL 15 s): one coordinator, named in the world
  ConfigMap, watches and lists the Leases; every other member renews its own Lease, watches the
  world ConfigMap alone and checks its coordinator's Lease once a renewal interval
  (`agent.elastic.coordinator`).

On 2 shared cores N full agents cannot run, so the members are lightweight:

* **heartbeats**: every member's Lease is renewed through `KubernetesStore.beat` (the same
  Lease, annotation and holder an agent writes) by a pool of clients at the agents' interval,
  sent as one raw merge patch each (`RawRenewals`: the official client's model round trip
  costs the bench more CPU than the write costs the server); the rate achieved is printed
  beside the one offered (a member renewing slower is still live while within
  ``EDL_MEMBER_TTL``; where even that is not reached, the size is measured with a longer
  TTL, and the table says so);
* **proposers**: `PROPOSERS` members run the real `Membership.tick` loop (watch wake-ups,
  the poll, debounce, compare-and-swap writes of the world): they form the world, as the
  first of N agents to find the change due would; with N proposers the world is the same,
  written by one of them, and the others' reads are the load computed below;
* **watchers**: `WATCHERS` real `KubernetesWatch` streams (as each member holds one: before,
  on the Leases and the ConfigMap; after, a follower's, on the ConfigMap alone) count the events
  each receives; N members receive N times that. After, one more watch as the coordinator holds
  it (the Leases too) is counted apart: the job's events are it plus N - 1 followers'.

Per size: the time from the first heartbeat to a world of all N (**form**), from 10 % more
members' first heartbeats to a world with them (**grow**), the world ConfigMap's size (and
its share of etcd's 1.5 MiB limit), and in the steady state etcd's writes a second (its
``etcd_mvcc_put_total``, minus the same window before the job existed), the watch events a
member receives a second (measured) and the job's in all (x N), and the Lease list calls the
members' polls make (N / 0.2 s, each of N Leases: computed from the constants, not run).
And a breakdown of form and grow, printed as each ends: when every member's Lease existed,
each world generation the bench saw (its size, when), and the two proposers' store calls
(count / seconds per kind, compare-and-swaps lost).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import requests
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from agent.elastic.errors import StoreUnavailable
from agent.elastic.kubernetes_store import ClientApi, KubernetesStore
from agent.elastic.kubernetes_watch import KubernetesWatch
from agent.elastic.membership import Membership, MembershipSettings
from agent.elastic.world import Member
from tests.e2e.harness.controlplane import ControlPlane
from tests.support.waiting import wait_for

NAMESPACE = "edl-membership"
PROPOSERS = 2
WATCHERS = 10
ETCD_LIMIT = 1_572_864
"""etcd's default request size limit (``--max-request-bytes``, 1.5 MiB): no object may pass it."""
SETTINGS = MembershipSettings(max_size=100_000)
"""The agents' defaults, but no world cap (``EDL_MAX_WORLD`` would be set to the job's size)."""
BEFORE = replace(SETTINGS, heartbeat_interval=1.0, ttl=10.0)
"""The defaults before issue 38."""
MODES = ("before", "after")
BEAT_CLIENTS = 16


def _api_client(cp: ControlPlane) -> Any:
    api = k8s_config.new_client_from_config(config_file=str(cp.kubeconfig))  # type: ignore[no-untyped-call]
    api.configuration.connection_pool_maxsize = 4
    api.rest_client.pool_manager.connection_pool_kw["maxsize"] = 4
    return api


def _store(api: Any, job: str, coordinated: bool) -> KubernetesStore:
    apis = (k8s.CoreV1Api(api), k8s.CoordinationV1Api(api))
    return KubernetesStore(ClientApi(*apis, NAMESPACE, k8s.ApiException), job,
                           coordinated=coordinated)  # fmt: skip


class RawRenewals(ClientApi):
    """`ClientApi` whose Lease renewal is one raw HTTP merge patch (create on 404)."""

    def __init__(self, cp: ControlPlane, api: Any) -> None:
        super().__init__(
            k8s.CoreV1Api(api), k8s.CoordinationV1Api(api), NAMESPACE, k8s.ApiException
        )
        assert cp.pki is not None
        self._http = requests.Session()
        self._http.cert = (str(cp.pki.admin.cert), str(cp.pki.admin.key))
        self._ca = str(cp.pki.ca.cert)
        self._base = f"{cp.server}/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"

    def renew_lease(
        self, name: str, holder: str, renew_time: str, annotations: dict[str, str],
        labels: dict[str, str],
    ) -> None:  # fmt: skip
        body = {
            "metadata": {"name": name, "labels": labels, "annotations": annotations},
            "spec": {"holderIdentity": holder, "renewTime": renew_time, "leaseDurationSeconds": 15},
        }
        r = self._http.patch(f"{self._base}/{name}", json=body, verify=self._ca, timeout=30,
                             headers={"Content-Type": "application/merge-patch+json"})  # fmt: skip
        if r.status_code == 404:
            r = self._http.post(self._base, json=body, verify=self._ca, timeout=30)
        if r.status_code >= 300:
            raise StoreUnavailable(f"renew lease: HTTP {r.status_code}")


def members(job: str, start: int, count: int) -> list[Member]:
    """Members as agents describe themselves (pod names, a pod IP each, the default ports)."""
    return [
        Member(time.time(), f"{job}-trainer-7d9f5c8b4-{i:05d}", secrets.token_hex(4),
               f"10.{100 + i // 65536}.{i // 256 % 256}.{i % 256}", (29543, 29544))
        for i in range(start, start + count)
    ]  # fmt: skip


class Heartbeats:
    """Every member's Lease renewed through `KubernetesStore.beat` at the agents' interval."""

    def __init__(self, cp: ControlPlane, job: str, settings: MembershipSettings) -> None:
        self._settings = settings
        self._stores = [
            KubernetesStore(RawRenewals(cp, _api_client(cp)), job) for _ in range(BEAT_CLIENTS)
        ]
        self._members: list[Member] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=BEAT_CLIENTS)
        # Joiners' first renewals on their own clients: not queued behind a renewal round.
        self._joiners = [
            KubernetesStore(RawRenewals(cp, _api_client(cp)), job) for _ in range(BEAT_CLIENTS)
        ]
        self._join_pool = ThreadPoolExecutor(max_workers=BEAT_CLIENTS)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.beats = 0
        self.failures = 0
        self.first_round_s = 0.0
        """Seconds the first round took: every member's Lease created (the form's floor)."""

    def add(self, more: list[Member], at_once: bool = False) -> None:
        """Members to renew from the next round on; `at_once`: their first renewal now, as an
        agent's `Membership.join` makes it (not up to a renewal interval later)."""
        if at_once:
            shards = [more[i::BEAT_CLIENTS] for i in range(BEAT_CLIENTS)]
            list(self._join_pool.map(self._beat_all, self._joiners, shards))
        with self._lock:
            self._members.extend(more)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._join_pool.shutdown(wait=True, cancel_futures=True)

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.is_set():
            started = time.monotonic()
            with self._lock:
                batch = list(self._members)
            shards = [batch[i::BEAT_CLIENTS] for i in range(BEAT_CLIENTS)]
            list(self._pool.map(self._beat_all, self._stores, shards))
            if not self.first_round_s:
                self.first_round_s = time.monotonic() - t0
            left = self._settings.heartbeat_interval - (time.monotonic() - started)
            self._stop.wait(max(0.0, left))

    def _beat_all(self, store: KubernetesStore, shard: list[Member]) -> None:
        for m in shard:
            if self._stop.is_set():
                return
            try:
                store.beat(m)
                self.beats += 1
            except Exception:
                self.failures += 1


@dataclass
class StoreCalls:
    """The store calls one member's `Membership` made: count and seconds per kind, and the
    world writes that lost their compare-and-swap (``write_world`` False)."""

    count: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    cas_lost: int = 0

    def wrap(self, store: KubernetesStore) -> KubernetesStore:
        for name in ("heartbeats", "read_world", "write_world", "claim", "heartbeat_of"):
            setattr(store, name, self._counted(name, getattr(store, name)))
        return store

    def _counted(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kw: Any) -> Any:
            t = time.monotonic()
            try:
                out = fn(*args, **kw)
            finally:
                self.count[name] = self.count.get(name, 0) + 1
                self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - t
            if name == "write_world" and out is False:
                self.cas_lost += 1
            return out

        return counted

    def snapshot(self) -> StoreCalls:
        return StoreCalls(dict(self.count), dict(self.seconds), self.cas_lost)

    def since(self, before: StoreCalls) -> str:
        """``kind count/seconds`` for each kind called since `before`."""
        parts = []
        for name in sorted(self.count):
            n = self.count[name] - before.count.get(name, 0)
            if n:
                sec = self.seconds[name] - before.seconds.get(name, 0.0)
                parts.append(f"{name} {n}/{sec:.1f}s")
        lost = self.cas_lost - before.cas_lost
        return ", ".join(parts) + (f", CAS lost {lost}" if lost else "")


class Proposer:
    """One member running the agent's `Membership` loop: tick on a wake or each poll."""

    def __init__(
        self, cp: ControlPlane, job: str, me: Member, settings: MembershipSettings,
        coordinated: bool,
    ) -> None:  # fmt: skip
        self.calls = StoreCalls()
        store = self.calls.wrap(_store(_api_client(cp), job, coordinated))
        self.membership = Membership(store, me, settings)
        self._poll = settings.poll_interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.ticks = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self.membership.close()

    def _run(self) -> None:
        self.membership.join()
        while not self._stop.is_set():
            due = self.membership.due_in()
            poll = self._poll if due is None else min(self._poll, due)
            self.membership.wait_for_change(poll)
            self.membership.tick()
            self.ticks += 1


class CountingWatch:
    """A member's `KubernetesWatch` on the job, counting every event its streams deliver."""

    def __init__(self, cp: ControlPlane, job: str, members: bool) -> None:
        self.events = 0
        store = _store(_api_client(cp), job, coordinated=True)
        api = store._api  # the store's own ClientApi: the streams an agent holds
        counting = self

        class Counted:
            def watch_leases(self, selector: str, timeout: int) -> Iterator[tuple[str, str, str]]:
                for event in api.watch_leases(selector, timeout):
                    counting.events += 1
                    yield event

            def watch_config_map(self, name: str, timeout: int) -> Iterator[tuple[str, str]]:
                for event in api.watch_config_map(name, timeout):
                    counting.events += 1
                    yield event

        self.watch = KubernetesWatch(
            Counted(), f"edl.paddlepaddle.org/job={job}", f"edl-{job}-world", members=members
        )

    def close(self) -> None:
        self.watch.close()


@dataclass
class MembershipResult:
    mode: str
    members: int
    ttl_s: float
    form_s: float
    grow_s: float
    world_bytes: int
    world_object_bytes: int
    bytes_per_member: float
    largest_fitting: int
    beats_offered_per_s: float
    beats_achieved_per_s: float
    etcd_writes_per_s: float
    watch_events_per_member_per_s: float
    coordinator_watch_events_per_s: float
    watch_events_per_job_per_s: float
    lease_lists_per_s: float
    leases_listed_per_s: float
    world_reads_per_s: float
    one_list_bytes: int
    one_list_ms: float


def world_size(cp: ControlPlane, job: str) -> tuple[int, int, int]:
    """(members in the world record, bytes of the record, bytes of the ConfigMap object)."""
    r = cp.request(
        "GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps/edl-{job}-world", ok=(200, 404)
    )
    if r.status_code == 404:
        return 0, 0, 0
    text = (r.json().get("data") or {}).get("world") or ""
    try:
        count = len(json.loads(text).get("members") or [])
    except ValueError:
        count = 0
    return count, len(text.encode()), len(r.content)


class Generations:
    """The world generations seen while polling the record: (seconds since `t0`, generation,
    members), one row per generation."""

    def __init__(self, cp: ControlPlane, job: str, t0: float) -> None:
        self._cp, self._job, self._t0 = cp, job, t0
        self.rows: list[tuple[float, int, int]] = []

    def members(self) -> int:
        r = self._cp.request("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps/"
                             f"edl-{self._job}-world", ok=(200, 404))  # fmt: skip
        text = (r.json().get("data") or {}).get("world") or "" if r.status_code == 200 else ""
        try:
            world = json.loads(text)
        except ValueError:
            return 0
        generation, count = int(world.get("generation") or 0), len(world.get("members") or [])
        if not self.rows or self.rows[-1][1] != generation:
            self.rows.append((time.monotonic() - self._t0, generation, count))
        return count

    def describe(self) -> str:
        return ", ".join(f"g{g} {c} at {t:.1f}s" for t, g, c in self.rows)


def etcd_puts(cp: ControlPlane) -> float:
    text = requests.get(f"{cp.etcd_url}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("etcd_mvcc_put_total"))  # fmt: skip


def measure_one(
    cp: ControlPlane, n: int, say: Callable[[str], None], settings: MembershipSettings,
    mode: str = "after", window: float = 20.0,
) -> MembershipResult:  # fmt: skip
    job = f"scale{n}-{mode}"
    after = mode == "after"
    quiet0, t_q0 = etcd_puts(cp), time.monotonic()
    time.sleep(5)
    baseline = (etcd_puts(cp) - quiet0) / (time.monotonic() - t_q0)
    first = members(job, 0, n)
    beats = Heartbeats(cp, job, settings)
    proposers = [Proposer(cp, job, m, settings, after) for m in first[:PROPOSERS]]
    beats.add(first[PROPOSERS:])
    watchers: list[CountingWatch] = []
    coordinator: CountingWatch | None = None
    try:
        t0 = time.monotonic()
        beats.start()
        for p in proposers:
            p.start()
        seen = Generations(cp, job, t0)
        wait_for(lambda: seen.members() >= n, timeout_s=600, interval_s=0.1,
                 what=f"a world of {n} members")  # fmt: skip
        form = time.monotonic() - t0
        say(
            f"  {n} members: formed in {form:.1f} s; every Lease created by "
            f"{beats.first_round_s or form:.1f} s; worlds seen: {seen.describe()}"
        )
        for i, p in enumerate(proposers):
            say(
                f"    proposer {i}{' (coordinator)' if p.membership.coordinating else ''}: "
                f"{p.calls.since(StoreCalls())}"
            )
        watchers = [CountingWatch(cp, job, members=not after) for _ in range(min(WATCHERS, n))]
        coordinator = CountingWatch(cp, job, members=True) if after else None
        time.sleep(3)  # the watchers' opening replay is no steady-state traffic
        counted0 = sum(w.events for w in watchers)
        coordinated0 = coordinator.events if coordinator else 0
        puts0, beats0, t1 = etcd_puts(cp), beats.beats, time.monotonic()
        time.sleep(window)
        dt = time.monotonic() - t1
        puts = (etcd_puts(cp) - puts0) / dt - baseline
        achieved = (beats.beats - beats0) / dt
        per_watcher = (sum(w.events for w in watchers) - counted0) / dt / max(1, len(watchers))
        per_coordinator = (coordinator.events - coordinated0) / dt if coordinator else 0.0
        size, record, obj = world_size(cp, job)
        t_list = time.monotonic()
        listed = cp.request(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
            f"?labelSelector=edl.paddlepaddle.org/job%3D{job}"
        )  # fmt: skip
        list_ms = 1000 * (time.monotonic() - t_list)
        more = members(job, n, max(1, n // 10))
        calls0 = [p.calls.snapshot() for p in proposers]
        t2 = time.monotonic()
        beats.add(more, at_once=True)
        created = time.monotonic() - t2
        seen = Generations(cp, job, t2)
        wait_for(lambda: seen.members() >= n + len(more), timeout_s=600, interval_s=0.1,
                 what=f"a world of {n + len(more)} members")  # fmt: skip
        grow = time.monotonic() - t2
        say(
            f"  {n} members: grown by {len(more)} in {grow:.1f} s; their Leases created by "
            f"{created:.1f} s; worlds seen: {seen.describe()}"
        )
        for i, (p, c0) in enumerate(zip(proposers, calls0, strict=True)):
            say(f"    proposer {i}: {p.calls.since(c0)}")
    finally:
        for w in watchers + ([coordinator] if coordinator else []):
            w.close()
        for p in proposers:
            p.stop()
        beats.stop()
        with contextlib.suppress(Exception):
            cp.request("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
                       f"?labelSelector=edl.paddlepaddle.org/job%3D{job}")  # fmt: skip
    per_member = record / max(1, size)
    fitting = int((ETCD_LIMIT - (obj - record)) / per_member)
    if after:  # the coordinator's watch and lists, the followers' world watch and reads
        job_events = per_coordinator + per_watcher * (n - 1)
        lists = 1 / settings.heartbeat_interval
        reads = n / settings.heartbeat_interval
    else:  # every member watches, lists and reads everything
        job_events, lists, reads = (
            per_watcher * n,
            n / settings.poll_interval,
            n / settings.poll_interval,
        )
    return MembershipResult(
        mode, n, settings.ttl, form, grow, record, obj, per_member, fitting,
        n / settings.heartbeat_interval, achieved, puts, per_watcher, per_coordinator, job_events,
        lists, lists * n, reads, len(listed.content), list_ms,
    )  # fmt: skip


def measure_membership(
    cp: ControlPlane, sizes: list[int], say: Callable[[str], None],
    modes: tuple[str, ...] = MODES,
) -> list[dict[str, object]]:  # fmt: skip
    """Every mode and size in turn; prints the table and returns the figures.

    Sizes beyond what this machine renews within the TTL get a TTL of three renewal rounds
    as achieved at the size before, where that size was short of its offered rate (the
    table's ``TTL s`` column).
    """
    # The watches the bench closes say so; the figures are what matters here.
    logging.getLogger("agent.elastic").setLevel(logging.ERROR)
    cp.request("POST", "/api/v1/namespaces",
               json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
               ok=(201, 409))  # fmt: skip
    results: list[MembershipResult] = []
    for mode in modes:
        base = BEFORE if mode == "before" else SETTINGS
        done: list[MembershipResult] = []
        for n in sizes:
            settings = base
            last = done[-1] if done else None
            # The machine's limit shows only where it renewed less than was offered.
            if last is not None and 0 < last.beats_achieved_per_s < 0.9 * last.beats_offered_per_s:
                round_s = n / last.beats_achieved_per_s  # one renewal of every member
                if round_s > 0.5 * base.ttl:
                    settings = replace(base, ttl=float(math.ceil(3 * round_s)))
            say(f"== membership {mode}: a job of {n} members (TTL {settings.ttl:.0f} s)")
            try:
                done.append(measure_one(cp, n, say, settings, mode))
            except AssertionError as e:
                say(f"  {n} members did not form: {e}")
                break
        results += done
    print()
    print(f"{'mode':>6} {'members':>7} {'TTL s':>5} {'form s':>7} {'grow s':>7} {'world KiB':>9} "
          f"{'of 1.5MiB':>9} {'fits up to':>10} {'beats/s offered/done':>21} {'etcd writes/s':>13} "
          f"{'watch ev/s member':>17} {'coordinator':>11} {'watch ev/s job':>14} "
          f"{'lease lists/s':>13} {'leases/s':>10} {'world reads/s':>13} "
          f"{'1 list KiB/ms':>14}")  # fmt: skip
    for r in results:
        kib = r.world_object_bytes / 1024
        print(f"{r.mode:>6} {r.members:>7} {r.ttl_s:>5.0f} {r.form_s:>7.1f} {r.grow_s:>7.1f} "
              f"{kib:>9.1f} "
              f"{100 * r.world_object_bytes / ETCD_LIMIT:>8.1f}% {r.largest_fitting:>10} "
              f"{r.beats_offered_per_s:>10.0f}/{r.beats_achieved_per_s:<10.0f} "
              f"{r.etcd_writes_per_s:>13.0f} {r.watch_events_per_member_per_s:>17.1f} "
              f"{r.coordinator_watch_events_per_s:>11.0f} "
              f"{r.watch_events_per_job_per_s:>14.0f} {r.lease_lists_per_s:>13.1f} "
              f"{r.leases_listed_per_s:>10.0f} {r.world_reads_per_s:>13.0f} "
              f"{r.one_list_bytes / 1024:>7.0f}/{r.one_list_ms:<6.0f}")  # fmt: skip
    return [asdict(r) for r in results]
