"""Fixtures for the e2e layer: a real control plane, the real adapter, per-test namespaces.

* `control_plane` (session): etcd + kube-apiserver + kube-controller-manager on 127.0.0.1,
  built by tests/e2e/controlplane/build.sh when missing (done once, before the first test, so
  a cold build does not count against a test's timeout).
* `metrics_adapter` (session): `edl-adapter serve` behind the aggregation layer, Available.
* `e2e_ns` (per test): a fresh namespace with a pod runner (the stand-in kubelet); a test
  that parametrizes `kubelet_nodes` gets Node objects and a runner that only runs the pods
  the scheduler bound to them (it must run kube-scheduler: `ControlPlane.start_scheduler`).
* `edl_images` (session): EDL's container images from `make images`, built before any test
  starts when a selected test uses them.
* `kueue` (session): Kueue's manager with its CRDs and webhooks (tests/e2e/harness/kueue.py),
  built by tests/e2e/kueue/build.sh before any test starts when a selected test uses it.
* `kubelet_node_group` (session): real nodes, each containerd v2 and a kubelet registered as
  Node `edl-node-<n>` on a loopback address of its own (tests/e2e/harness/kubelet_node.py;
  `EDL_E2E_KUBELET_NODES` of them, default 3), built by tests/e2e/node/build.sh before any test
  starts when a selected test uses them; kube-scheduler runs while they are up.
  `kubelet_node` is the first of them.
* A session that selects a test marked `kubelet` (`make e2e-kubelet`: `-m kubelet`, a session
  of its own) gets a control plane that gives pods ServiceAccount tokens as a real cluster does
  and keeps EndpointSlices (`kubelet_session_settings`); the pod runner's sessions do not.
* When a test fails, the tail of every component's log is attached to its report.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from tests.e2e.harness.adapter import AdapterSettings, MetricsAdapter
from tests.e2e.harness.bodies import as_body
from tests.e2e.harness.controlplane import ControlPlane, ControlPlaneSettings, ensure_binaries
from tests.e2e.harness.incluster import kubelet_session_settings
from tests.e2e.harness.install import ensure_images
from tests.e2e.harness.kubelet_events import KubeletEventLog
from tests.e2e.harness.kubelet_node import (
    KubeletNode,
    KubeletNodeGroup,
    KubeletNodeSettings,
    ensure_node_binaries,
)
from tests.e2e.harness.kueue import Kueue, KueueSettings, ensure_kueue
from tests.e2e.harness.nodes import NodeSpec
from tests.e2e.harness.podrunner import LoopbackAddressPool, PodRunner, PodRunnerSettings
from tests.e2e.harness.processes import HarnessError
from tests.e2e.harness.session import LOG_SOURCES, E2ENamespace, Kubectl, work_root
from tests.support.waiting import WaitTimeout, wait_for

_E2E_DIR = Path(__file__).resolve().parent


_BUILD: dict[str, Any] = {}


def _e2e_selected(session: pytest.Session) -> bool:
    return any(_E2E_DIR in Path(str(item.fspath)).resolve().parents for item in session.items)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Builds (or finds cached) control-plane binaries before any e2e test starts its clock."""
    if not _e2e_selected(session) or session.config.option.collectonly:
        return
    _BUILD["kubelet_session"] = any(item.get_closest_marker("kubelet") for item in session.items)
    try:
        _BUILD["bin"] = ensure_binaries()
    except HarnessError as e:
        _BUILD["error"] = e
    if any("edl_images" in getattr(item, "fixturenames", ()) for item in session.items):
        try:  # `make images` (cached), also before any test's clock starts
            _BUILD["images"] = ensure_images()
        except HarnessError as e:
            _BUILD["images_error"] = e
    if any("kueue" in getattr(item, "fixturenames", ()) for item in session.items):
        try:  # `make kueue` (cached), also before any test's clock starts
            _BUILD["kueue"] = ensure_kueue()
        except HarnessError as e:
            _BUILD["kueue_error"] = e
    if any("kubelet_node_group" in getattr(item, "fixturenames", ()) for item in session.items):
        try:  # `make node` (cached), also before any test's clock starts
            _BUILD["node"] = ensure_node_binaries()
        except HarnessError as e:
            _BUILD["node_error"] = e


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed and LOG_SOURCES:
        tails = []
        for source in LOG_SOURCES:
            try:
                tails.append(source.log_tails(25))
            except Exception as e:
                tails.append(f"(could not read logs: {e!r})")
        report.sections.append(("e2e component logs (tails)", "\n".join(tails)))
    return report


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    if "error" in _BUILD:
        raise _BUILD["error"]
    bin_dir = _BUILD.get("bin") or ensure_binaries()
    work = work_root()
    settings = ControlPlaneSettings(bin_dir=bin_dir, work_dir=work)
    if _BUILD.get("kubelet_session"):
        settings = kubelet_session_settings(settings)
    cp = ControlPlane(settings)
    print(f"\ne2e control plane: work dir {work}, logs in {cp.log_dir}")
    LOG_SOURCES.append(cp)
    try:
        cp.start()
        yield cp
    finally:
        cp.stop()
        LOG_SOURCES.remove(cp)


@pytest.fixture(scope="session")
def edl_images() -> dict[str, str]:
    """`make images` (podman): `adapter`, `trainer`, `trainer-torch` -> the image reference."""
    if "images_error" in _BUILD:
        raise _BUILD["images_error"]
    return dict(_BUILD.get("images") or ensure_images())


@pytest.fixture(scope="session")
def kueue(control_plane: ControlPlane) -> Iterator[Kueue]:
    """Kueue v0.17 managing the namespaces labelled `edl.e2e/kueue: "true"`."""
    if "kueue_error" in _BUILD:
        raise _BUILD["kueue_error"]
    cache = _BUILD.get("kueue") or ensure_kueue()
    manager = Kueue(control_plane, KueueSettings(cache, control_plane.work_dir / "kueue"))
    LOG_SOURCES.append(manager)
    try:
        manager.start()
        yield manager
    finally:
        manager.stop()
        LOG_SOURCES.remove(manager)


@pytest.fixture(scope="session")
def kubelet_node_group(
    control_plane: ControlPlane, loopback_pool: LoopbackAddressPool
) -> Iterator[KubeletNodeGroup]:
    """`EDL_E2E_KUBELET_NODES` (default 3) nodes `edl-node-<n>`, containerd + the kubelet
    each, on loopback addresses of their own; kube-scheduler runs while they are up (and is
    stopped after, if it was not running before: the pod runner's tests want none)."""
    if "node_error" in _BUILD:
        raise _BUILD["node_error"]
    bin_dir = _BUILD.get("node") or ensure_node_binaries()
    count = int(os.environ.get("EDL_E2E_KUBELET_NODES", "3"))
    group = KubeletNodeGroup(
        [
            KubeletNode(
                control_plane,
                KubeletNodeSettings(
                    bin_dir,
                    control_plane.work_dir / f"node-{n}",
                    name=f"edl-node-{n}",
                    node_ip=loopback_pool.take(None),
                ),
            )
            for n in range(1, count + 1)
        ],
        control_plane.work_dir / "node-images",
    )
    started_scheduler = control_plane.scheduler is None
    LOG_SOURCES.append(group)
    try:
        if started_scheduler:
            control_plane.start_scheduler()
        group.start()
        yield group
    finally:
        group.stop()
        if started_scheduler:
            control_plane.stop_scheduler()
        LOG_SOURCES.remove(group)


@pytest.fixture(scope="session")
def kubelet_event_log(kube_api: client.ApiClient) -> Iterator[KubeletEventLog]:
    """The kubelets' container Events (Pulled, Created, Started) of the whole session."""
    log = KubeletEventLog(kube_api)
    log.start()
    try:
        yield log
    finally:
        log.stop()


@pytest.fixture(autouse=True)
def _kubelet_containers(request: pytest.FixtureRequest) -> Iterator[None]:
    """A `kubelet` test's containers, as its kubelets reported them: kept on the test's report
    (user property `kubelet`) for the layer's summary (`pytest_terminal_summary`)."""
    if request.node.get_closest_marker("kubelet") is None:
        yield
        return
    log: KubeletEventLog = request.getfixturevalue("kubelet_event_log")
    mark = len(log)
    yield
    for event in log.since(mark):
        request.node.user_properties.append(("kubelet", event.line()))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The e2e-kubelet layer's log: each test's containers, in the kubelets' own words."""
    lines = []
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "teardown":
                continue
            said = [
                text for key, text in getattr(report, "user_properties", ()) if key == "kubelet"
            ]
            if said:
                lines.append(f"{report.nodeid}:")
                lines.extend(f"  {text}" for text in said)
    if lines:
        terminalreporter.write_sep("=", "containers the kubelets made (their Events)")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def kubelet_node(kubelet_node_group: KubeletNodeGroup) -> KubeletNode:
    """The first node of `kubelet_node_group`."""
    return kubelet_node_group.nodes[0]


@pytest.fixture(scope="session")
def kube_api(control_plane: ControlPlane) -> client.ApiClient:
    api: client.ApiClient = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    return api


@dataclass
class _AdapterLogs:
    adapter: MetricsAdapter

    def log_tails(self, lines: int = 25) -> str:
        p = self.adapter.process
        return f"----- {p.name} ({p.log}) -----\n{p.tail(lines)}"


@pytest.fixture(scope="session")
def metrics_adapter(control_plane: ControlPlane) -> Iterator[MetricsAdapter]:
    adapter = MetricsAdapter(control_plane, AdapterSettings())
    logs = _AdapterLogs(adapter)
    LOG_SOURCES.append(logs)
    try:
        adapter.start()
        adapter.register()
        adapter.wait_available(timeout_s=60)
        yield adapter
    finally:
        adapter.stop()
        LOG_SOURCES.remove(logs)


@pytest.fixture(scope="session")
def loopback_pool() -> LoopbackAddressPool:
    return LoopbackAddressPool()


def _venv_env() -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    return {
        "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(_E2E_DIR.parents[1]),
        "PYTHONUNBUFFERED": "1",
    }


@pytest.fixture
def kubelet_nodes() -> tuple[NodeSpec, ...]:
    """Nodes for the namespace's pod runner (none: it runs every pod, unbound); names get
    the namespace as prefix. Tests parametrize it to get nodes."""
    return ()


@pytest.fixture
def e2e_ns(
    request: pytest.FixtureRequest,
    control_plane: ControlPlane,
    kube_api: client.ApiClient,
    loopback_pool: LoopbackAddressPool,
    kubelet_nodes: tuple[NodeSpec, ...],
) -> Iterator[E2ENamespace]:
    core = client.CoreV1Api(kube_api)
    base = re.sub(r"[^a-z0-9]+", "-", request.node.name.removeprefix("test_").lower())
    base = base[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:5]}"
    core.create_namespace(as_body({"metadata": {"name": name, "labels": {"edl.e2e/test": "true"}}}))
    runner_api = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    runner = PodRunner(
        runner_api,
        PodRunnerSettings(
            namespace=name,
            log_dir=control_plane.log_dir / "pods",
            base_env=_venv_env(),
            nodes=tuple(replace(n, name=f"{name}-{n.name}") for n in kubelet_nodes),
        ),
        loopback_pool,
    )
    load_dir = control_plane.work_dir / "load"
    load_dir.mkdir(exist_ok=True)
    LOG_SOURCES.append(runner)
    runner.start()
    try:
        yield E2ENamespace(name=name, runner=runner, load_dir=load_dir, api=kube_api)
    finally:
        _delete_jobs(kube_api, name)
        try:
            core.delete_namespace(name, propagation_policy="Background")
        except client.ApiException as e:
            print(f"deleting namespace {name}: {e.status} {e.reason}")
        runner.stop()
        LOG_SOURCES.remove(runner)


def _delete_jobs(api: client.ApiClient, namespace: str) -> None:
    """Delete the namespace's Deployments and their pods, and wait (60 s at most) until gone.

    The namespace's own deletion takes its time; until it reaches them, a test's jobs would
    stay in every sizer's view and compete with the next test's jobs for room (a job whose
    pods went with its node takes its request back from the others' extras).
    """
    apps = client.AppsV1Api(api)
    try:
        apps.delete_collection_namespaced_deployment(namespace, propagation_policy="Foreground")
    except client.ApiException as e:
        print(f"deleting the Deployments of {namespace}: {e.status} {e.reason}")
        return
    try:
        wait_for(
            lambda: not apps.list_namespaced_deployment(namespace).items,
            timeout_s=60,
            interval_s=0.2,
            what=f"the Deployments of {namespace} gone",
        )
    except WaitTimeout as e:
        print(e)


@pytest.fixture(scope="session")
def kubectl(control_plane: ControlPlane) -> Kubectl:
    binary = shutil.which("kubectl") or "/usr/bin/kubectl"
    return Kubectl(binary, control_plane.kubeconfig)
