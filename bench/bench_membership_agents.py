"""Kubernetes detect through real agents: a joiner's Lease -> the new world ConfigMap, a leave.

`bench_membership_watch.py` times the store's watch alone. Here real agents (`edl-agent run
--elastic --membership kubernetes`, each with the elastic PyTorch digits trainer, in-process
re-init) run on this host against the e2e harness's real etcd + kube-apiserver (built from the
Go module proxy on first use, as `make test` does) with the admin kubeconfig. Agent ``a``
trains alone; each round a joiner ``b<i>`` starts, trains at the new size, and is SIGTERMed.
A watcher of its own (the API server's watch on the job's Leases and its world ConfigMap, every
event stamped on arrival) gives, per round:

* ``join``: the joiner's Lease ADDED (its first heartbeat: its warm trainer is ready) -> the
  ConfigMap MODIFIED with a world that has it, written by an agent's membership loop (the
  survivors' and the joiner's watch, the lone joiner's debounce, the compare-and-swap write);
* ``leave``: SIGTERM to the joiner's agent -> the world without it written (by the leaving
  agent itself, at once); ``lease gone -> world``: its Lease DELETED -> that world.

Both events of a figure come through the same watcher, so its own latency (a few ms, see
bench_membership_watch) cancels out. Min / median / max in ms over `--rounds`; printed, never
asserted.

    python bench/bench_membership_agents.py --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support.net import free_port  # noqa: E402
from tests.support.waiting import WaitTimeout, wait_for  # noqa: E402

PY = sys.executable
T = TypeVar("T")
JOB = "bench"
WORLD = f"edl-{JOB}-world"
LABELS = f"edl.paddlepaddle.org/job={JOB}"
STEP_BOUND = 600.0
"""Seconds a joiner may take to train its first step (a torch import beside busy trainers)."""


@dataclass
class Events:
    """What the watcher saw: (arrival, lease name) per Lease event, (arrival, world) per write."""

    added: list[tuple[float, str]] = field(default_factory=list)
    deleted: list[tuple[float, str]] = field(default_factory=list)
    worlds: list[tuple[float, int, list[str]]] = field(default_factory=list)
    """(arrival, generation, member ids) of each world record written."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def first(self, found: Callable[[], T | None], what: str) -> T:
        """Waits (bounded) for `found` to see its event; what it returns then."""

        def seen() -> bool:
            with self.lock:
                return found() is not None

        wait_for(seen, timeout_s=STEP_BOUND, what=what, interval_s=0.005)
        with self.lock:
            at = found()
        assert at is not None
        return at


def watch_forever(
    list_call: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    on_event: Callable[[str, Any], None],
) -> None:
    """Re-opens the API server's watch whenever it ends (a daemon thread's body).

    `list_call` is the client's own list method: the watch reads the type of the objects
    to build from its documentation.
    """
    from kubernetes import watch

    while True:
        try:
            stream = watch.Watch().stream(list_call, *args, timeout_seconds=300, **kwargs)  # type: ignore[no-untyped-call]
            for event in stream:
                on_event(str(event["type"]), event["object"])
        except Exception as e:  # the bench goes on; a closed stream is re-opened
            print(f"watch: {e!r}", file=sys.stderr)
            time.sleep(1.0)


def start_watcher(api: Any, namespace: str, events: Events) -> None:
    from kubernetes import client

    coord, core = client.CoordinationV1Api(api), client.CoreV1Api(api)

    def on_lease(kind: str, lease: Any) -> None:
        now = time.time()
        with events.lock:
            if kind == "ADDED":
                events.added.append((now, lease.metadata.name))
            elif kind == "DELETED":
                events.deleted.append((now, lease.metadata.name))

    def on_world(kind: str, cm: Any) -> None:
        now = time.time()
        raw = (cm.data or {}).get("world")
        if kind not in ("ADDED", "MODIFIED") or not raw:
            return
        world = json.loads(raw)
        ids = [str(m["id"]) for m in world.get("members", [])]
        with events.lock:
            events.worlds.append((now, int(world["generation"]), ids))

    watches = (
        (coord.list_namespaced_lease, {"label_selector": LABELS}, on_lease),
        (core.list_namespaced_config_map, {"field_selector": f"metadata.name={WORLD}"}, on_world),
    )
    for call, kwargs, handler in watches:
        threading.Thread(
            target=watch_forever, args=(call, (namespace,), kwargs, handler), daemon=True
        ).start()


class KubeAgents:
    """Agents on this host, one per member, against the control plane's API server."""

    def __init__(self, tmp: Path, kubeconfig: Path, namespace: str) -> None:
        self.tmp, self.kubeconfig, self.namespace = tmp, kubeconfig, namespace
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "KUBECONFIG": str(self.kubeconfig),
            "EDL_NAMESPACE": self.namespace,
            "POD_NAME": name,
            "POD_IP": "127.0.0.1",
            "EDL_TRAINER_PORTS": "auto",  # every member on one host
            "EDL_ELASTIC_DIR": str(self.tmp / name),
            "EDL_AGENT_LOG_LEVEL": os.environ.get("EDL_AGENT_LOG_LEVEL", "INFO"),
        }
        cmd = [PY, "-m", "agent", "run", "--host", "127.0.0.1", "--port", str(free_port()),
               "--elastic", "--job", JOB, "--membership", "kubernetes", "--min", "1",
               "--max", "8", "--", PY, "-m", "examples.train_digits_torch_elastic",
               "--epochs", "400", "--step-sleep", "0.02"]  # fmt: skip
        log = open(self.tmp / f"{name}.log", "wb")
        self.procs[name] = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=log)

    def first_step(self, name: str, generation: int) -> float | None:
        path = self.tmp / name / "control" / f"timings-g{generation}.json"
        try:
            value = json.loads(path.read_text()).get("first_step")
        except (OSError, ValueError):
            return None
        return float(value) if value is not None else None

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()  # its trainer follows (the agent's lease)
                proc.wait(10)


def world_with(
    events: Events, member: str, present: bool, after: float
) -> Callable[[], tuple[float, int] | None]:
    """The first world written after `after` that has (or has not) `member`: (arrival, gen)."""

    def found() -> tuple[float, int] | None:
        for at, gen, ids in events.worlds:
            if at >= after and (member in ids) == present:
                return at, gen
        return None

    return found


def one_round(agents: KubeAgents, events: Events, i: int) -> dict[str, float]:
    name = f"b{i}"
    lease = f"edl-{JOB}-{name}"
    t_start = time.time()
    agents.start(name)
    added = events.first(
        lambda: next((t for t, n in events.added if n == lease and t >= t_start), None),
        f"{name}'s Lease",
    )
    joined_at, gen = events.first(world_with(events, name, True, t_start), f"a world with {name}")
    wait_for(
        lambda: agents.first_step(name, gen) is not None,
        timeout_s=STEP_BOUND,
        what=f"{name}'s first step",
        interval_s=0.05,
    )
    time.sleep(1.0)
    t_sig = time.time()
    agents.procs[name].send_signal(signal.SIGTERM)
    left_at, _ = events.first(world_with(events, name, False, t_sig), f"a world without {name}")
    deleted = events.first(
        lambda: next((t for t, n in events.deleted if n == lease and t >= t_sig), None),
        f"{name}'s Lease deleted",
    )
    agents.procs[name].wait(120)
    return {
        "join": joined_at - added,
        "leave": left_at - t_sig,
        "lease gone -> world": left_at - deleted,
    }


def main() -> int:
    from kubernetes import client, config

    from tests.e2e.harness.bodies import as_body
    from tests.e2e.harness.controlplane import ControlPlane, ControlPlaneSettings, ensure_binaries

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="edl-bench-agents-"))
    cp = ControlPlane(ControlPlaneSettings(bin_dir=ensure_binaries(), work_dir=tmp / "kube"))
    agents: KubeAgents | None = None
    rows: list[dict[str, float]] = []
    try:
        cp.start()
        api = config.new_client_from_config(config_file=str(cp.kubeconfig))  # type: ignore[no-untyped-call]
        namespace = f"bench-agents-{uuid.uuid4().hex[:6]}"
        client.CoreV1Api(api).create_namespace(as_body({"metadata": {"name": namespace}}))
        events = Events()
        start_watcher(api, namespace, events)
        agents = KubeAgents(tmp, cp.kubeconfig, namespace)
        agents.start("a")
        events.first(world_with(events, "a", True, 0.0), "the first world")
        for i in range(args.rounds):
            rows.append(one_round(agents, events, i))
            print(
                f"round {i}: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in rows[-1].items()),
                flush=True,
            )
    except WaitTimeout as e:
        print(f"bench: {e}; logs kept in {tmp}")
        return 1
    finally:
        if agents is not None:
            agents.stop()
        cp.stop()
    print(f"\nKubernetes, real agents, {len(rows)} rounds; ms, min / median / max")
    for key in rows[0] if rows else ():
        values = sorted(r[key] * 1000 for r in rows)
        print(f"{key:<22} {values[0]:8.1f} / {statistics.median(values):8.1f} / {values[-1]:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
