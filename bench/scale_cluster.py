"""The real control plane of bench/bench_scale.py, filled through its API (no I/O beyond it).

`ScaleCluster` starts the e2e harness's etcd, kube-apiserver, kube-controller-manager (the
HPA every 15 s, its real default) and kube-scheduler, and kwok (bench/kwok/build.sh) as the
kubelet of every node; `grow` creates the objects of bench/scale_world.py through the API
with a pool of admin clients; `Churn` deletes and re-creates pods of other work at a steady
rate. `Api` is one `requests.Session` per thread with the admin certificate, retrying what a
loaded API server refuses for a moment (429, 5xx, a reset connection), at most 8 times.
"""

from __future__ import annotations

import random
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from bench import scale_world as world
from tests.e2e.harness.controlplane import ControlPlane, ControlPlaneSettings, ensure_binaries
from tests.e2e.harness.processes import HarnessError, ManagedProcess

ROOT = Path(__file__).resolve().parents[1]
KWOK_BUILD = ROOT / "bench" / "kwok" / "build.sh"
RETRIED = (429, 500, 502, 503, 504)
KWOK_OPTIONS = """\
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: 32
  nodePlayStageParallelism: 8
"""
"""kwok's default of 4 status patches at a time turns ~30 pods a second Running here: 150,000
would take over an hour."""


class Api:
    """Admin requests to kube-apiserver, one session (keep-alive connection) per thread."""

    def __init__(self, cp: ControlPlane) -> None:
        assert cp.pki is not None
        self.base = cp.server
        self.cert = (str(cp.pki.admin.cert), str(cp.pki.admin.key))
        self.ca = str(cp.pki.ca.cert)
        self._local = threading.local()

    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.cert = self.cert
            session.verify = self.ca
            self._local.session = session
        return session

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        ok: tuple[int, ...] = (200, 201),
        content_type: str = "application/json",
        timeout: float = 60.0,
    ) -> requests.Response:
        """One request, retried (bounded) while the server is overloaded or restarting."""
        last: str = ""
        for attempt in range(8):
            try:
                r = self._session().request(
                    method,
                    self.base + path,
                    json=body,
                    headers={"Content-Type": content_type} if body is not None else None,
                    timeout=timeout,
                    verify=self.ca,  # per request: REQUESTS_CA_BUNDLE would beat the session's
                )
            except requests.RequestException as e:
                last = repr(e)
            else:
                if r.status_code in ok:
                    return r
                if r.status_code not in RETRIED:
                    raise HarnessError(f"{method} {path} -> {r.status_code}: {r.text[:300]}")
                last = f"{r.status_code}: {r.text[:200]}"
            time.sleep(min(5.0, 0.2 * 2**attempt))
        raise HarnessError(f"{method} {path} failed 8 times; last: {last}")

    def timed_get(self, path: str) -> tuple[float, int]:
        """(seconds, status) of one GET, never retried (a latency probe)."""
        t0 = time.perf_counter()
        try:
            r = self._session().get(self.base + path, timeout=30, verify=self.ca)
            status = r.status_code
        except requests.RequestException:
            status = 0
        return time.perf_counter() - t0, status

    def count(self, path: str, field_selector: str = "") -> int:
        """Objects a list returns: ``remainingItemCount`` without a selector, else paged names.

        (The API server leaves the remaining count out of a list with a selector.)
        """
        if not field_selector:
            body = self.call("GET", f"{path}?limit=1").json()
            meta = body.get("metadata") or {}
            return len(body.get("items") or []) + int(meta.get("remainingItemCount") or 0)
        total, token = 0, ""
        for _ in range(10_000):
            query = f"limit=5000&fieldSelector={field_selector}" + (
                f"&continue={token}" if token else ""
            )
            r = self._session().get(
                f"{self.base}{path}?{query}", timeout=120, verify=self.ca,
                headers={"Accept": METADATA_LIST},
            )  # fmt: skip
            r.raise_for_status()
            body = r.json()
            total += len(body.get("items") or [])
            token = (body.get("metadata") or {}).get("continue") or ""
            if not token:
                break
        return total


METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
"""Only the objects' metadata: a count of 5,000 Pending pods is a small answer."""


def post_path(obj: dict[str, Any]) -> str:
    """Where an object of bench/scale_world.py is created."""
    kind, meta = obj["kind"], obj["metadata"]
    ns = meta.get("namespace")
    return {
        "Node": "/api/v1/nodes",
        "Pod": f"/api/v1/namespaces/{ns}/pods",
        "Deployment": f"/apis/apps/v1/namespaces/{ns}/deployments",
        "HorizontalPodAutoscaler": f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers",
        "PriorityClass": "/apis/scheduling.k8s.io/v1/priorityclasses",
        "Namespace": "/api/v1/namespaces",
    }[kind]


@dataclass
class Created:
    """What a `create_all` made, and how fast."""

    objects: int = 0
    seconds: float = 0.0

    @property
    def per_second(self) -> float:
        return self.objects / self.seconds if self.seconds > 0 else 0.0


def create_all(api: Api, objects: Iterable[dict[str, Any]], workers: int = 12) -> Created:
    """POST every object (an existing one counts as created), `workers` at a time."""
    t0 = time.monotonic()
    done = Created()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        batch: list[dict[str, Any]] = []

        def flush() -> None:
            for _ in pool.map(lambda o: api.call("POST", post_path(o), o, ok=(201, 409)), batch):
                done.objects += 1
            batch.clear()

        for obj in objects:
            batch.append(obj)
            if len(batch) >= 2000:
                flush()
        flush()
    done.seconds = time.monotonic() - t0
    return done


def ensure_kwok() -> Path:
    """kwok's binary (built and cached by bench/kwok/build.sh on first use)."""
    print("kwok: bench/kwok/build.sh (cached after the first run, about 8 min cold)", flush=True)
    done = subprocess.run(["bash", str(KWOK_BUILD)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise HarnessError(f"kwok build failed:\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


@dataclass
class ScaleCluster:
    """The control plane, kwok, and the objects of the steps grown so far."""

    work_dir: Path
    kwok: bool = True
    cp: ControlPlane = field(init=False)
    api: Api = field(init=False)
    nodes: int = 0
    jobs: int = 0
    kwok_process: ManagedProcess | None = None
    metrics_port: int = 9400

    def start(self) -> None:
        bin_dir = ensure_binaries()
        settings = ControlPlaneSettings(
            bin_dir=bin_dir,
            work_dir=self.work_dir,
            hpa_sync_period="15s",
            kcm_verbosity=1,
            kcm_vmodule="",
            etcd_quota_bytes=8 << 30,
            apiserver_extra_args=(
                "--max-requests-inflight=800",
                "--max-mutating-requests-inflight=400",
            ),
        )
        self.cp = ControlPlane(settings)
        self.cp.start()
        self.api = Api(self.cp)
        self.cp.start_scheduler()
        if self.kwok:
            binary = ensure_kwok()
            options = self.work_dir / "kwok.yaml"
            options.write_text(KWOK_OPTIONS)
            self.kwok_process = ManagedProcess(
                "kwok",
                [
                    str(binary),
                    f"--kubeconfig={self.cp.kubeconfig}",
                    f"--manage-nodes-with-annotation-selector={world.KWOK_ANNOTATION}=fake",
                    "--v=WARN",
                    "-c",
                    str(binary.parent / "stages.yaml"),
                    "-c",
                    str(options),
                ],
                self.cp.log_dir / "kwok.log",
            )
            self.kwok_process.start()
        namespaces = ("edl-system", *world.WORK_NAMESPACES, *world.JOB_NAMESPACES)
        create_all(
            self.api,
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}
                for n in namespaces
            ],
        )
        create_all(self.api, world.priority_classes())

    def stop(self) -> None:
        if self.kwok_process is not None:
            self.kwok_process.stop()
        self.cp.stop()

    def components(self) -> dict[str, int]:
        """Process name -> pid of every part of the cluster (for RSS and CPU)."""
        procs = [*self.cp.components(), *([self.kwok_process] if self.kwok_process else [])]
        return {p.name: p.pid for p in procs if p.pid is not None}

    def grow(self, nodes: int, jobs: int, say: Callable[[str], None]) -> None:
        """Create nodes, their pods of other work, and jobs up to this step's sizes."""
        if nodes > self.nodes:
            made = create_all(self.api, self._nodes(range(self.nodes, nodes)))
            self._lift_not_ready(range(self.nodes, nodes))
            say(f"  {made.objects} nodes in {made.seconds:.0f} s")
            pods = (p for i in range(self.nodes, nodes) for p in world.other_pods(i))
            made = create_all(self.api, pods)
            say(f"  {made.objects} pods of other work in {made.seconds:.0f} s "
                f"({made.per_second:.0f}/s)")  # fmt: skip
            self.nodes = nodes
        if jobs > self.jobs:
            port = self.metrics_port
            made = create_all(
                self.api,
                (o for j in range(self.jobs, jobs)
                 for o in (world.job_deployment(j, port), world.job_hpa(j))),
            )  # fmt: skip
            say(f"  {made.objects // 2} jobs (Deployment + HPA) in {made.seconds:.0f} s")
            self.jobs = jobs

    def _nodes(self, indices: Iterable[int]) -> Iterator[dict[str, Any]]:
        for i in indices:
            obj = world.node(i)
            status = world.node_status(i)["status"]
            if self.kwok:
                del status["conditions"]  # kwok's node-initialize stage reports them
            obj["status"] = status
            yield obj

    def _lift_not_ready(self, indices: Iterable[int]) -> None:
        """The API server taints a new node not-ready; no node lifecycle controller runs here."""

        def lift(i: int) -> None:
            taints = [world.GPU_TAINT] if world.is_gpu_node(i) else None
            self.api.call(
                "PATCH",
                f"/api/v1/nodes/{world.node_name(i)}",
                {"spec": {"taints": taints}},
                content_type="application/merge-patch+json",
            )

        with ThreadPoolExecutor(max_workers=12) as pool:
            list(pool.map(lift, indices))

    def settled(self) -> tuple[int, int, int]:
        """(pods, Running pods, Pending pods) in the cluster now (Running: neither Pending
        nor Succeeded/Failed, which no pod of the bench becomes)."""
        total = self.api.count("/api/v1/pods")
        pending = self.api.count("/api/v1/pods", "status.phase%3DPending")
        return total, total - pending, pending


class Churn:
    """Pods of other work deleted and created again at `rate` of each a second, in a thread."""

    def __init__(self, api: Api, nodes: Callable[[], int], rate: float, seed: int = 7) -> None:
        self._api = api
        self._nodes = nodes
        self._rate = rate
        self._rnd = random.Random(seed)
        self._generation: dict[tuple[int, int], int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=6)
        self.done = 0
        self.failed = 0

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="churn", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def close(self) -> None:
        self.stop()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            next_at += 1.0 / self._rate
            i, k = self._rnd.randrange(self._nodes()), self._rnd.randrange(world.PODS_PER_NODE)
            g = self._generation.get((i, k), 0)
            self._generation[(i, k)] = g + 1
            self._pool.submit(self._replace, world.other_pod(i, k, g), world.other_pod(i, k, g + 1))
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _replace(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        meta = old["metadata"]
        try:
            self._api.call(
                "DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                {"gracePeriodSeconds": 0}, ok=(200, 202, 404),
            )  # fmt: skip
            self._api.call("POST", post_path(new), new, ok=(201, 409))
            self.done += 1
        except HarnessError:
            self.failed += 1
