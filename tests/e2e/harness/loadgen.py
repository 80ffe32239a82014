"""A trainer stand-in that serves real Prometheus text at a load the test controls.

Run as a pod command by the pod runner:

    python -m tests.e2e.harness.loadgen --host $(POD_IP) --port 9400 --load-file /tmp/x/load.json

`load.json` holds `{"samples_per_second": 250}` (per pod). The file is re-read every 0.1 s and
the counters are integrated over time, so `edl_trainer_samples_total` grows at exactly that
rate; the test raises or lowers the load by rewriting the file. Series and names follow
docs/metrics-contract.md. A missing or unreadable file means a load of 0.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BATCH = 32
"""Samples per simulated step."""
COMM_FRACTION = 0.25
"""Share of each step spent in communication (gives `comm_time_ratio` = 0.25)."""
STEP_SECONDS = 0.2
"""Simulated wall time of one step (for the step-duration histogram)."""


class Trainer:
    """Counters integrated from a piecewise-constant per-pod rate."""

    def __init__(self, load_file: Path) -> None:
        self.load_file = load_file
        self.samples = 0.0
        self.rate = 0.0
        self._last = time.monotonic()
        self._mtime = -1.0
        self._lock = threading.Lock()

    def _read_rate(self) -> float:
        try:
            mtime = self.load_file.stat().st_mtime
            if mtime != self._mtime:
                self._mtime = mtime
                load = json.loads(self.load_file.read_text())
                self.rate = max(0.0, float(load["samples_per_second"]))
        except (OSError, ValueError, KeyError, TypeError):
            self.rate = 0.0
            self._mtime = -1.0
        return self.rate

    def tick(self) -> None:
        with self._lock:
            now = time.monotonic()
            self.samples += self.rate * (now - self._last)
            self._last = now
            self._read_rate()

    def exposition(self) -> str:
        self.tick()
        with self._lock:
            samples = self.samples
        steps = samples / BATCH
        step_sum = steps * STEP_SECONDS
        lines = [
            "# HELP edl_trainer_samples_total Training samples processed by this pod's trainer.",
            "# TYPE edl_trainer_samples_total counter",
            f"edl_trainer_samples_total {samples:.6f}",
            "# HELP edl_trainer_steps_total Optimizer steps completed by this pod's trainer.",
            "# TYPE edl_trainer_steps_total counter",
            f"edl_trainer_steps_total {steps:.6f}",
            "# HELP edl_trainer_step_duration_seconds Wall time of one training step.",
            "# TYPE edl_trainer_step_duration_seconds histogram",
            'edl_trainer_step_duration_seconds_bucket{le="0.1"} 0',
            f'edl_trainer_step_duration_seconds_bucket{{le="0.5"}} {steps:.6f}',
            f'edl_trainer_step_duration_seconds_bucket{{le="+Inf"}} {steps:.6f}',
            f"edl_trainer_step_duration_seconds_sum {step_sum:.6f}",
            f"edl_trainer_step_duration_seconds_count {steps:.6f}",
            "# HELP edl_trainer_comm_seconds_total Wall time spent in gradient communication.",
            "# TYPE edl_trainer_comm_seconds_total counter",
            f"edl_trainer_comm_seconds_total {step_sum * COMM_FRACTION:.6f}",
            "# HELP edl_trainer_up 1 while a trainer process is running.",
            "# TYPE edl_trainer_up gauge",
            "edl_trainer_up 1",
            "# HELP edl_gpu_devices GPUs NVML sees.",
            "# TYPE edl_gpu_devices gauge",
            "edl_gpu_devices 0",
        ]
        return "\n".join(lines) + "\n"


def serve(host: str, port: int, trainer: Trainer) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] == "/metrics":
                body = trainer.exposition().encode()
                ctype = "text/plain; version=0.0.4; charset=utf-8"
            elif self.path in ("/healthz", "/readyz"):
                body, ctype = b"ok\n", "text/plain"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, default=9400)
    ap.add_argument("--load-file", type=Path, required=True)
    args = ap.parse_args(argv)
    trainer = Trainer(args.load_file)
    server = serve(args.host, args.port, trainer)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://{args.host}:{args.port}/metrics"
    print(f"loadgen serving {url} from {args.load_file}", flush=True)
    while not stop.wait(0.1):
        trainer.tick()
    server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
