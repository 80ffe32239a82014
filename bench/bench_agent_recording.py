"""Cost of the agent's training API and of a scrape (printed, never asserted).

1. One recorded step (`begin_step` + `end_step`, and with one `record_comm`): median of
   200k individually timed calls, minus the median cost of timing nothing.
2. The same counting done with prometheus_client (default and multiprocess mode, the latter in
   a child process because the mode is fixed at import).
3. A real Paddle step of the example model (digits MLP, batch 32, 1 rank), and the recording
   cost as a share of it.
4. A report flush (background thread, off the training path).
5. `/metrics` scrape latency over HTTP, with 1 and 100 trainer incarnations on disk.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

N = 200_000


def per_call_ns(fn: Callable[[], object], n: int = N) -> float:
    """Median ns of one call of `fn`, each timed alone, minus the timer's own median."""
    clock = time.perf_counter_ns

    def run(f: Callable[[], object]) -> float:
        samples = []
        for _ in range(n):
            t = clock()
            f()
            samples.append(clock() - t)
        return statistics.median(samples)

    baseline = run(lambda: None)
    return max(0.0, run(fn) - baseline)


def bench_prometheus_client() -> dict[str, float]:
    from prometheus_client import CollectorRegistry, Counter, Histogram

    reg = CollectorRegistry()
    steps = Counter("steps", "s", registry=reg)
    samples = Counter("samples", "s", registry=reg)
    comm = Counter("comm_seconds", "s", registry=reg)
    hist = Histogram("step_seconds", "s", registry=reg)

    def step() -> None:
        comm.inc(0.001)
        steps.inc()
        samples.inc(32)
        hist.observe(0.004)

    return {"prometheus_client step (3 inc + 1 observe)": per_call_ns(step, N // 2)}


def child_multiprocess() -> None:
    for name, ns in bench_prometheus_client().items():
        print(f"{name}\t{ns}")


def main() -> None:
    from agent.trainer.recording import StepRecorder

    rec = StepRecorder()

    def step() -> None:
        rec.begin_step()
        rec.end_step(32)

    def step_with_comm() -> None:
        rec.begin_step()
        rec.record_comm(0.001, 35880)
        rec.end_step(32)

    def with_block() -> None:
        with rec.step(32):
            pass

    figures = {
        "begin_step + end_step": per_call_ns(step),
        "begin_step + record_comm + end_step": per_call_ns(step_with_comm),
        "record_step(samples, seconds)": per_call_ns(lambda: rec.record_step(32, 0.004)),
        "with recorder.step(samples)": per_call_ns(with_block),
    }
    figures.update(bench_prometheus_client())
    with tempfile.TemporaryDirectory() as mp:
        out = subprocess.run(
            [sys.executable, __file__, "--child-multiprocess"],
            env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": mp},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    for line in out.splitlines():
        name, raw = line.split("\t")
        figures[name.replace("prometheus_client", "prometheus_client multiprocess")] = float(raw)

    print(f"== recording cost per step (median of {N} timed calls, timer overhead removed)")
    for name, ns in figures.items():
        print(f"  {name:<52} {ns / 1000:6.3f} µs")

    step_s = paddle_step_seconds()
    ours = figures["begin_step + record_comm + end_step"] / 1e9
    print("== share of a real Paddle step (digits MLP 64-64-64-10, batch 32, CPU, 1 rank)")
    print(f"  median Paddle step: {step_s * 1000:.3f} ms")
    print(f"  recording a step (with comm) costs {100 * ours / step_s:.4f} % of it")

    bench_flush_and_scrape()


def paddle_step_seconds(steps: int = 400) -> float:
    import numpy as np
    import paddle
    import paddle.nn.functional as F

    from examples.train_digits import build_model, load_data

    paddle.seed(0)
    x, y, _, _ = load_data(0)
    model = build_model(64)
    opt = paddle.optimizer.Adam(learning_rate=0.01, parameters=model.parameters())
    times = []
    rng = np.random.default_rng(0)
    for i in range(steps + 50):
        idx = rng.choice(len(x), 32, replace=False)
        t = time.perf_counter()
        loss = F.cross_entropy(model(paddle.to_tensor(x[idx])), paddle.to_tensor(y[idx]))
        loss.backward()
        opt.step()
        opt.clear_grad()
        if i >= 50:
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_flush_and_scrape() -> None:
    from agent.process.app import create_registry
    from agent.process.exporter import MetricsServer
    from agent.process.readiness import Readiness
    from agent.protocol.trainer_world import TrainerWorld
    from agent.trainer.flushing import ReportFlusher
    from agent.trainer.recording import StepRecorder
    from agent.trainer.reports import report_path

    class Stub:
        world = TrainerWorld(rank=0, world_size=2)
        pid: int | None = os.getpid()
        starts = 1

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        rec = StepRecorder()
        for _ in range(1000):
            rec.record_step(32, 0.004)
        flusher = ReportFlusher(rec, report_path(d, 1), TrainerWorld(), 1, 60)
        flushes = []
        for _ in range(500):
            t = time.perf_counter()
            flusher.flush()
            flushes.append(time.perf_counter() - t)
        print("== report flush (background thread, not on the training path)")
        print(f"  median {statistics.median(flushes) * 1e6:.1f} µs per flush")

        server = MetricsServer(
            create_registry(d, Stub(), None), lambda: Readiness(True, ""), "127.0.0.1", 0
        )
        server.start()
        try:
            print("== /metrics scrape latency over HTTP (loopback, new connection each)")
            for incarnations in (1, 100):
                for i in range(2, incarnations + 1):
                    ReportFlusher(rec, report_path(d, i), TrainerWorld(), i, 60).flush()
                url = f"http://127.0.0.1:{server.port}/metrics"
                lat = []
                size = 0
                for _ in range(300):
                    t = time.perf_counter()
                    with urllib.request.urlopen(url, timeout=5) as r:
                        size = len(r.read())
                    lat.append(time.perf_counter() - t)
                lat.sort()
                median_ms = statistics.median(lat) * 1000
                p99_ms = lat[int(0.99 * len(lat))] * 1000
                print(
                    f"  {incarnations:>3} incarnation(s): median {median_ms:.2f} ms, "
                    f"p99 {p99_ms:.2f} ms, {size} bytes"
                )
        finally:
            server.close()


if __name__ == "__main__":
    if "--child-multiprocess" in sys.argv:
        child_multiprocess()
    else:
        main()
