"""Where the serving process spends its CPU on one query (a sampling profile, printed).

It starts bench_adapter.py's filled server (``--pods`` pods' samples in the store, plain
HTTP, the production code path: the asyncio front end and the app's threads), drives one
query with ``--clients`` keep-alive clients for ``--seconds`` while ``py-spy record --gil``
samples the thread holding the GIL in that process, then prints the functions holding the most
samples, inclusive (the function and what it calls) and self (the function's own code). So
percentages are of the time the process ran Python code (one thread at a time: the GIL), the
time a request costs the process.

Run: ``.venv/bin/python bench/profile_adapter.py [--pods 1000]
[--query pods|pod|deploy|distinct] [--seconds 10] [--clients 1] [--top 25]`` (py-spy comes with
the ``dev`` extra). ``distinct`` is the ``pods/*`` read with a new ``metricLabelSelector`` on
every request (``gpu=0``, ``gpu=1``...): no answer or item is reused, the adapter's cold path.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_adapter import (  # noqa: E402
    QUERIES,
    QUERY,
    RawClient,
    free_port,
    start_filled,
    wait_ready,
)

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def frame_name(frame: str) -> str:
    """``func (path/to/file.py:12)`` -> ``func (file.py)``: lines of one function together."""
    m = _FRAME.match(frame.strip())
    if m is None:
        return frame.strip()
    return f"{m['func']} ({Path(m['file']).name})"


def summarize(raw: Path, top: int, rate: int, requests: int) -> str:
    """Inclusive and self sample shares per function from py-spy's ``--format raw``, and the
    Python time (GIL held) per request: samples / sampling rate / requests."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [frame_name(f) for f in stack.split(";")]
        frames = [f for f in frames if not f.startswith("process ") and not f.startswith("thread ")]
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    per_request = total / rate * 1000 / max(1, requests)
    lines = [f"{total} samples: {per_request:.3f} ms of Python (GIL held) per request"]
    for title, counter in (("inclusive", inclusive), ("self", own)):
        lines.append(f"-- {title}")
        for name, count in counter.most_common(top):
            lines.append(f"{100 * count / max(1, total):5.1f}%  {name}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--query", choices=["pods", "pod", "deploy", "distinct"], default="pods")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    ap.add_argument(
        "--waiting",
        action="store_true",
        help="sample threads waiting for the GIL too (default: only the thread holding it)",
    )
    args = ap.parse_args()
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        raise SystemExit("profile_adapter: py-spy not found (pip install -e '.[dev]')")
    query = {"pods": QUERY, "pod": QUERIES["pod"], "deploy": QUERIES["deploy"]}.get(
        args.query, QUERY + "&metricLabelSelector=gpu%3D{n}"
    )
    with tempfile.TemporaryDirectory(prefix="profile-adapter-") as tmp:
        work = Path(tmp)
        port = free_port()
        server = start_filled(args.pods, port, False, work)
        try:
            wait_ready(port, False, args.pods)
            raw = work / "profile.txt"
            spy = subprocess.Popen(
                [
                    py_spy,
                    "record",
                    "--pid",
                    str(server.pid),
                    "--rate",
                    str(args.rate),
                    "--duration",
                    str(int(args.seconds)),
                    "--format",
                    "raw",
                    "--output",
                    str(raw),
                    "--nonblocking",
                    *([] if args.waiting else ["--gil"]),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            counts = [0] * args.clients
            stop = time.monotonic() + args.seconds

            def client(k: int) -> None:
                conn = RawClient(port, False)
                while time.monotonic() < stop:
                    conn.get(query.format(n=f"{k}-{counts[k]}"))
                    counts[k] += 1
                conn.close()

            threads = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(args.seconds + 60)
            spy.wait(args.seconds + 60)
            print(
                f"profile_adapter: {args.pods} pods, {query}, {args.clients} client(s): "
                f"{sum(counts) / args.seconds:.0f} req/s while sampled"
            )
            print(summarize(raw, args.top, args.rate, sum(counts)))
        finally:
            server.terminate()
            server.wait(15)


if __name__ == "__main__":
    main()
