"""Membership detect on both backends: another member's write -> this agent's watch wakes.

Issue 27 asks for detection within ~50-100 ms of the write on both membership backends. Two
`MembershipStore`s of one job per backend, as two agents hold them: one writes (a joiner's
first heartbeat, a new world record, a clean leave), the other's `StoreWatch` must wake.
Measured per kind over `--rounds` rounds: write start -> wake (the wake), and wake -> the
change read back through the store (what the agent does next), min / median / max in ms.

- local: `LocalStore` in a temporary directory (inotify);
- kubernetes: `KubernetesStore` against the e2e harness's real etcd + kube-apiserver (built
  from the Go module proxy on first use, as `make test` does), Leases and the world ConfigMap
  through the API server's watch.

A renewal must not wake the agent: counted per backend (`renewal wakes`), expected 0.
Figures are printed, never asserted. `--no-kubernetes` runs the local backend alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.elastic.local_store import LocalStore  # noqa: E402
from agent.elastic.store import MembershipStore, StoreWatch  # noqa: E402
from agent.elastic.world import Member, World  # noqa: E402

WAKE_BOUND = 30.0
"""Seconds a wake may take before the round counts as missed (a bound, not a figure)."""
QUIET = 0.5
"""How long a renewal is watched for a wake that must not come."""
KINDS = ("join", "world", "leave")

Samples = dict[str, list[float]]


def drain(watch: StoreWatch) -> None:
    """Swallows wakes already queued (the opening replay, a previous round's echoes)."""
    deadline = time.monotonic() + 10.0
    while watch.wait(0.3) and time.monotonic() < deadline:
        pass


def timed(
    watch: StoreWatch, write: Callable[[], object], seen: Callable[[], bool]
) -> tuple[float, float]:
    """Write -> wake, and wake -> the change read back (seconds); NaN when it never woke."""
    t0 = time.monotonic()
    write()
    if not watch.wait(WAKE_BOUND):
        return float("nan"), float("nan")
    woke = time.monotonic()
    deadline = woke + WAKE_BOUND
    while not seen() and time.monotonic() < deadline:
        time.sleep(0.001)
    return woke - t0, time.monotonic() - woke


def one_round(
    i: int, a: Member, mine: MembershipStore, theirs: MembershipStore, watch: StoreWatch
) -> tuple[dict[str, tuple[float, float]], bool]:
    """Round `i`: a join, a new world, a renewal (must stay quiet), a leave."""
    b = Member(time.time(), f"b{i}", "1", "127.0.0.1", (3, 4))

    def has_b() -> bool:
        return any(h.member.id == b.id for h in mine.heartbeats())

    got: dict[str, tuple[float, float]] = {}
    got["join"] = timed(watch, lambda: theirs.beat(b), has_b)
    drain(watch)
    version = theirs.read_world().version
    text = World(i + 1, (a, b)).to_json()
    got["world"] = timed(
        watch,
        lambda: theirs.write_world(text, version),
        lambda: mine.read_world().version != version,
    )
    drain(watch)
    theirs.beat(b)  # a renewal: no wake expected
    renewal_woke = watch.wait(QUIET)
    drain(watch)
    got["leave"] = timed(watch, lambda: theirs.remove(b), lambda: not has_b())
    drain(watch)
    return got, renewal_woke


def measure(
    mine: MembershipStore, theirs: MembershipStore, rounds: int
) -> tuple[Samples, Samples, int]:
    """`rounds` rounds; the wakes, the reads back, and how many renewals woke the agent."""
    wakes: Samples = {k: [] for k in KINDS}
    reads: Samples = {k: [] for k in KINDS}
    renewal_wakes = 0
    a = Member(time.time(), "a", "1", "127.0.0.1", (1, 2))
    mine.beat(a)
    watch = mine.watch()
    try:
        drain(watch)
        for i in range(rounds):
            got, renewal_woke = one_round(i, a, mine, theirs, watch)
            renewal_wakes += renewal_woke
            for kind, (wake, read) in got.items():
                wakes[kind].append(wake)
                reads[kind].append(read)
    finally:
        watch.close()
    return wakes, reads, renewal_wakes


def kubernetes_pair(work: Path) -> tuple[Callable[[], None], MembershipStore, MembershipStore]:
    """A real control plane and two stores of one job in a fresh namespace; its stop."""
    from kubernetes import client, config

    from agent.elastic.kubernetes_store import ClientApi, KubernetesStore
    from tests.e2e.harness.bodies import as_body
    from tests.e2e.harness.controlplane import ControlPlane, ControlPlaneSettings, ensure_binaries

    cp = ControlPlane(ControlPlaneSettings(bin_dir=ensure_binaries(), work_dir=work))
    cp.start()
    api = config.new_client_from_config(config_file=str(cp.kubeconfig))  # type: ignore[no-untyped-call]
    namespace = f"bench-watch-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace(as_body({"metadata": {"name": namespace}}))

    def store() -> MembershipStore:
        calls = ClientApi(
            client.CoreV1Api(api), client.CoordinationV1Api(api), namespace, client.ApiException
        )
        return KubernetesStore(calls, "bench")

    return cp.stop, store(), store()


def ms(values: list[float]) -> str:
    got = [v * 1000 for v in values if v == v]
    missed = len(values) - len(got)
    if not got:
        return "missed"
    text = f"{min(got):.1f} / {statistics.median(got):.1f} / {max(got):.1f}"
    return text + (f" ({missed} missed)" if missed else "")


def show(backend: str, wakes: Samples, reads: Samples, renewal_wakes: int) -> None:
    for kind in KINDS:
        print(f"{backend:<12} {kind:<7} {ms(wakes[kind]):>26} {ms(reads[kind]):>26}")
    print(f"{backend:<12} renewal wakes: {renewal_wakes}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--no-kubernetes", action="store_true", help="the local backend only")
    args = parser.parse_args()
    print(f"{args.rounds} rounds; ms, min / median / max")
    print(f"{'backend':<12} {'change':<7} {'write -> wake':>26} {'wake -> read back':>26}")
    with tempfile.TemporaryDirectory(prefix="edl-bench-watch-") as tmp:
        root = Path(tmp) / "local"
        show("local", *measure(LocalStore.create(root), LocalStore(root), args.rounds))
        if args.no_kubernetes:
            return
        stop, mine, theirs = kubernetes_pair(Path(tmp) / "kube")
        try:
            show("kubernetes", *measure(mine, theirs, args.rounds))
        finally:
            stop()


if __name__ == "__main__":
    main()
