"""A loopback cluster to use by hand: control plane + adapter + pod runner, until Ctrl-C.

    .venv/bin/python -m tests.e2e.harness.devcluster [--namespace dev] [--no-adapter]

It prints the kubeconfig to export; pods created in the namespace run as local processes.
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import threading
from pathlib import Path

from kubernetes import client, config

from tests.e2e.harness.adapter import AdapterSettings, MetricsAdapter
from tests.e2e.harness.bodies import as_body
from tests.e2e.harness.controlplane import ControlPlane, ControlPlaneSettings, ensure_binaries
from tests.e2e.harness.podrunner import LoopbackAddressPool, PodRunner, PodRunnerSettings


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--namespace", default="dev", help="namespace whose pods run locally")
    ap.add_argument("--no-adapter", action="store_true", help="do not start edl-adapter")
    ap.add_argument("--work-dir", type=Path, default=None, help="default: a new temp dir")
    args = ap.parse_args(argv)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="edl-dev-"))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    cp = ControlPlane(ControlPlaneSettings(bin_dir=ensure_binaries(), work_dir=work))
    adapter: MetricsAdapter | None = None
    runner: PodRunner | None = None
    try:
        cp.start()
        if not args.no_adapter:
            adapter = MetricsAdapter(cp, AdapterSettings())
            adapter.start()
            adapter.register()
            adapter.wait_available()
        api = config.new_client_from_config(config_file=str(cp.kubeconfig))
        client.CoreV1Api(api).create_namespace(as_body({"metadata": {"name": args.namespace}}))
        runner = PodRunner(
            api,
            PodRunnerSettings(namespace=args.namespace, log_dir=cp.log_dir / "pods"),
            LoopbackAddressPool(),
        )
        runner.start()
        print(f"export KUBECONFIG={cp.kubeconfig}   # logs: {cp.log_dir}", flush=True)
        if adapter is not None:
            print(f"edl-adapter on {adapter.url}", flush=True)
        print("Ctrl-C to stop.", flush=True)
        stop.wait()
    finally:
        if runner is not None:
            runner.stop()
        if adapter is not None:
            adapter.stop()
        cp.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
