"""Is the adapter's RSS under hostile scrape targets a leak or a warm-up? (printed, not asserted)

Bench (d) of issue 25's acceptance (`bench/attacks_apiserver.py hostile-target`) showed the
adapter's RSS rise from 105 to 120 MB over 10 minutes of hostile targets, slowly (+0.46 MB a
minute over the second half) and never falling. RSS alone cannot tell a leak (objects that
accumulate) from memory the allocator keeps after use (glibc's per-thread arenas, freed
chunks it does not hand back) or bounded caches filling. This runs the real `edl-adapter
serve` in a child process with a monitor thread that reports, every `--every` seconds:

- RSS, and glibc's `mallinfo2()`: bytes in use (`uordblks` + `hblkhd`, the mmap'd chunks)
  and bytes free but kept in the arenas (`fordblks`);
- `sys.getallocatedblocks()` (Python objects' blocks alive) and gc's counts and objects;
- with `--tracemalloc`, the Python heap traced and the top growing allocation sites since
  `--settle` seconds into the hostile phase (tracing slows the adapter and costs memory of
  its own).

At the end the child runs a full `gc.collect()` (what it finds unreachable is printed by
type) and then `malloc_trim(0)`: RSS that falls back then was garbage waiting for a
collection or free memory the allocator held, not a leak.

The targets are the acceptance bench's (`attacks_apiserver.Targets`: 10 normal pods and one
each of 20,000 new label sets, 300 new label sets, garbage, a 4 MiB line, a 1 GiB body, a
slow body, a slow head, 10,000 headers; scraped every 1 s), normal for `--warmup` seconds,
then hostile for `--minutes`; a legitimate `pods/*` query every second.

Run: ``.venv/bin/python bench/hostile_memory.py [--minutes 5] [--every 15] [--tracemalloc]``
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import gc
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.attacks_apiserver import (  # noqa: E402
    HOSTILE,
    Targets,
    fresh_healthz,
    legit_pods,
    pod,
    stranger_context,
    targets,
)
from tests.support.net import free_port  # noqa: E402

LEGIT = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/legit/pods/%2A/samples_per_second"


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _libc() -> Any:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    return libc


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def _sample(libc: Any, began: float, top: list[str]) -> dict[str, Any]:
    import tracemalloc

    info = libc.mallinfo2()
    row: dict[str, Any] = {
        "t": round(time.monotonic() - began, 1),
        "rss_mb": round(_rss_mb(), 1),
        "malloc_in_use_mb": round((info.uordblks + info.hblkhd) / 1e6, 1),
        "malloc_free_held_mb": round(info.fordblks / 1e6, 1),
        "blocks": sys.getallocatedblocks(),
        "gc_objects": len(gc.get_objects()),
        "gc_collections": [s["collections"] for s in gc.get_stats()],
        "gc_count": list(gc.get_count()),
        "threads": threading.active_count(),
    }
    if tracemalloc.is_tracing():
        row["traced_mb"] = round(tracemalloc.get_traced_memory()[0] / 1e6, 1)
        row["top"] = top
    return row


def child(argv: list[str]) -> None:
    """The adapter (`edl-adapter serve argv[4:]`) with a monitor thread writing JSON lines.

    The parent creates `hostile-on` in the work folder when the targets turn hostile, and
    `stop` when it is done; the monitor then collects, trims, reports and ends the process.
    """
    work, every, trace, settle = Path(argv[0]), float(argv[1]), argv[2] == "1", float(argv[3])
    import tracemalloc

    if trace:
        tracemalloc.start(8)
    libc = _libc()
    began = time.monotonic()
    out, hostile_on, stop = work / "samples.jsonl", work / "hostile-on", work / "stop"

    def monitor() -> None:
        baseline = None
        with out.open("a") as f:
            for _ in range(100_000):  # bounded; `stop` ends it
                if stop.exists():
                    break
                top: list[str] = []
                hostile_for = (
                    time.time() - hostile_on.stat().st_mtime if hostile_on.exists() else -1
                )
                if trace and baseline is None and hostile_for >= settle:
                    baseline = tracemalloc.take_snapshot()
                elif baseline is not None:
                    diff = tracemalloc.take_snapshot().compare_to(baseline, "lineno")
                    top = [str(d) for d in diff[:8]]
                row = {**_sample(libc, began, top), "hostile_s": round(hostile_for, 1)}
                f.write(json.dumps(row) + "\n")
                f.flush()
                time.sleep(every)
            # What a full collection finds unreachable (cyclic garbage that the raised gen-0
            # threshold and the rare older collections had left), by type; then freed.
            gc.set_debug(gc.DEBUG_SAVEALL)
            found = gc.collect()
            kinds = collections.Counter(type(o).__name__ for o in gc.garbage).most_common(8)
            gc.set_debug(0)
            gc.garbage.clear()
            gc.collect()
            row = {**_sample(libc, began, []), "after": f"gc.collect(): {found} unreachable"}
            f.write(json.dumps({**row, "garbage": kinds}) + "\n")
            libc.malloc_trim(0)
            f.write(json.dumps({**_sample(libc, began, []), "after": "malloc_trim(0)"}) + "\n")
        os._exit(0)

    threading.Thread(target=monitor, daemon=True).start()
    from metrics_adapter.cli import main

    main(["serve", *argv[4:]])


def legit(port: int, stop: threading.Event, seen: list[int]) -> None:
    ctx = stranger_context()
    for _ in range(100_000):
        try:
            with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30)) as s:
                s.sendall(f"GET {LEGIT} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
                seen.append(int(s.recv(12)[9:12]))
        except (OSError, ValueError):
            seen.append(0)
        if stop.wait(1.0):
            return


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=5.0, help="hostile targets this long")
    parser.add_argument("--warmup", type=float, default=30.0, help="seconds of normal targets")
    parser.add_argument("--every", type=float, default=15.0, help="seconds between samples")
    parser.add_argument("--tracemalloc", action="store_true", help="trace the Python heap too")
    parser.add_argument(
        "--settle",
        type=float,
        default=60.0,
        help="--tracemalloc: seconds of hostile targets before the baseline snapshot",
    )
    parser.add_argument("--child", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    work = Path(tempfile.mkdtemp(prefix="edl-hostile-memory-"))
    out = work / "samples.jsonl"
    with targets() as tport:
        pods = legit_pods(tport) + [
            pod("ml", f"hostile-{k}", f"http://127.0.0.1:{tport}/hostile/{k}") for k in HOSTILE
        ]
        (work / "pods.yaml").write_text(yaml.safe_dump({"pods": pods}))
        port = free_port()
        serve = [
            "--host=127.0.0.1", f"--port={port}", f"--cert-dir={work / 'certs'}",
            "--source=static", f"--static-file={work / 'pods.yaml'}", "--scrape-interval=1s",
            "--authentication=none", "--authorization=none", "--log-level=error",
        ]  # fmt: skip
        argv = [sys.executable, __file__, "--child", str(work), str(args.every)]
        argv += ["1" if args.tracemalloc else "0", str(args.settle), *serve]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        log = (work / "adapter.log").open("wb")
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        stop = threading.Event()
        seen: list[int] = []
        client = threading.Thread(target=legit, args=(port, stop, seen), daemon=True)
        try:
            for _ in range(600):  # its start, bounded (tracing slows the imports a lot)
                if fresh_healthz(port) == 200 or proc.poll() is not None:
                    break
                time.sleep(0.5)
            client.start()
            time.sleep(args.warmup)
            Targets.hostile.set()
            (work / "hostile-on").touch()
            print(f"hostile targets on after {args.warmup:.0f} s of normal ones", flush=True)
            time.sleep(args.minutes * 60)
            (work / "stop").touch()
            proc.wait(600)
        finally:
            stop.set()
            proc.kill()
            proc.wait(10)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    print(
        f"{'hostile s':>9} {'RSS':>6} {'in use':>7} {'free held':>9} {'blocks':>8} "
        f"{'gc objects':>10} {'threads':>7} {'traced':>7}  (MB)"
    )
    for r in rows:
        print(
            f"{r.get('hostile_s', ''):>9} {r['rss_mb']:>6} {r['malloc_in_use_mb']:>7} "
            f"{r['malloc_free_held_mb']:>9} {r['blocks']:>8} {r['gc_objects']:>10} "
            f"{r['threads']:>7} {r.get('traced_mb', '-'):>7}  {r.get('after', '')}"
        )
    traced = [r for r in rows if r.get("top")]
    if traced:
        print(f"top growing allocation sites after {args.settle:.0f} s of hostile targets:")
        for line in traced[-1]["top"]:
            print(f"  {line}")
    for r in rows:
        if "garbage" in r:
            print(f"unreachable at the end, by type: {r['garbage']}")
    ok = sum(1 for c in seen if c == 200)
    print(f"legitimate queries answered 200: {ok} of {len(seen)}; load {os.getloadavg()[0]:.1f}")
    print(f"(samples in {out})")


if __name__ == "__main__":
    main()
