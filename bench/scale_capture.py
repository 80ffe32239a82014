"""A real cluster's sizing round, captured and replayed in-process (printed, never asserted).

`bench/scale_round.py` times the round on a generated cluster with an empty history; on the
control plane (bench/bench_scale.py) the same round costs 2-4 times as much CPU, because there
the HPAs have acted on earlier plans and the jobs have a history of measured sizes. To see
where a real round spends, *capture* reads the cluster through the adapter's own code: its
`KubernetesCapacitySource` (the same watches, the same view) and its `ConfigMapHistoryStore`
(the history ConfigMap), and writes what `run_round` takes (snapshot, history, clock, the
default policy) to one file. *replay* runs `run_round` on that file ``--repeat`` times and
prints its CPU seconds (best, median) and the plan's SHA-256, and with ``--profile`` where the
CPU goes (cProfile, by own time and by cumulative time); ``--compare REF`` replays the same
file with the ``edl_sizing`` of a git ref beside this tree's, in fresh processes taking
turns, and says whether both made the same plan::

    .venv/bin/python bench/bench_scale.py --steps 5000:1000 --no-membership --capture
    .venv/bin/python bench/scale_capture.py replay WORK_DIR/round-5000.pickle --profile
    .venv/bin/python bench/scale_capture.py replay FILE --compare main

The file is a pickle of this tree's classes: replay it with the code that wrote it, or a
version whose ``edl_sizing`` dataclasses have the same fields.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import pickle
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import MappingProxyType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after PYTHONPATH: --compare's ref package comes first


def capture(kubeconfig: Path, out: Path, timeout_s: float = 900.0) -> Path:
    """Read the cluster and its sizing history as the adapter does; write them to ``out``.

    Raises:
        TimeoutError: the watches did not list everything within ``timeout_s``.
    """
    from metrics_adapter.assembly import sizing_policy
    from metrics_adapter.kube.client import make_api_client
    from metrics_adapter.options import default_settings
    from metrics_adapter.sizing.backends import FALLBACK_HISTORY_NAMESPACE
    from metrics_adapter.sizing.cluster_watch import KubernetesCapacitySource
    from metrics_adapter.sizing.history_configmap import ConfigMapHistoryStore
    from metrics_adapter.sizing.kube_objects import JobDefaults

    settings = default_settings()
    api = make_api_client(kubeconfig)
    source = KubernetesCapacitySource(
        api, JobDefaults(max_workers=settings.sizing_default_max_workers)
    )
    source.start()
    try:
        deadline = time.monotonic() + timeout_s
        snapshot = source.snapshot()
        while snapshot is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the cluster's watches did not list within {timeout_s:.0f} s")
            time.sleep(0.5)
            snapshot = source.snapshot()
    finally:
        source.stop()
    history = ConfigMapHistoryStore(
        api,
        settings.sizing_history_namespace or FALLBACK_HISTORY_NAMESPACE,
        settings.sizing_history_configmap,
    ).load()
    doc = {
        "snapshot": snapshot,
        "history": history.to_json(),
        "now": time.time(),
        "policy": sizing_policy(settings),
    }
    write(doc, out)
    return out


def read_only(mapping: dict[Any, Any]) -> MappingProxyType[Any, Any]:
    """A pickled mapping proxy, rebuilt (``_Pickler``)."""
    return MappingProxyType(mapping)


class _Pickler(pickle.Pickler):
    """A pickler for the sizer's values: their read-only mappings go as ``MappingProxyType``
    over a copy of the dict (the standard pickler refuses a mapping proxy)."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, MappingProxyType):
            return read_only, (dict(obj),)
        return NotImplemented


def write(doc: dict[str, Any], out: Path) -> None:
    """``doc`` (snapshot, history JSON, now, policy) pickled into ``out``."""
    with out.open("wb") as f:
        _Pickler(f, protocol=pickle.HIGHEST_PROTOCOL).dump(doc)


def replay(path: Path, repeat: int, profile: bool, top: int) -> dict[str, Any]:
    """``run_round`` on the captured inputs: CPU seconds per round and the plan's digest."""
    import edl_sizing
    from edl_sizing.history import SizeHistory
    from edl_sizing.sizing_round import run_round

    doc = pickle.loads(path.read_bytes())
    snapshot, now, policy = doc["snapshot"], doc["now"], doc["policy"]
    cpu: list[float] = []
    digest = ""
    for _ in range(repeat):
        history = SizeHistory()
        history.load_json(doc["history"])
        started = time.process_time()
        result = run_round(snapshot, history, policy, now)
        cpu.append(time.process_time() - started)
        if result.error is not None:
            raise SystemExit(f"scale_capture: the round failed: {result.error!r}")
        text = json.dumps(result.plan.to_dict(), sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    if profile:
        history = SizeHistory()
        history.load_json(doc["history"])
        prof = cProfile.Profile()
        prof.enable()
        run_round(snapshot, history, policy, now)
        prof.disable()
        for order in ("tottime", "cumulative"):
            print(f"--- run_round on {path.name} (cProfile, by {order})")
            pstats.Stats(prof).sort_stats(order).print_stats(top)
    jobs = snapshot.jobs
    return {
        "nodes": len(snapshot.nodes), "pods": len(snapshot.pods), "jobs": len(jobs),
        "workers": sum(j.replicas for j in jobs), "cpu": cpu, "digest": digest,
        "code": str(Path(edl_sizing.__file__).parent),
    }  # fmt: skip


def _child(code: Path | None, path: Path, repeat: int) -> dict[str, Any]:
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = f"{code}{os.pathsep}{env.get('PYTHONPATH', '')}"
    out = subprocess.run(
        [sys.executable, __file__, "replay", str(path), "--repeat", str(repeat), "--json"],
        env=env, cwd=ROOT, capture_output=True, text=True, check=True, timeout=1800,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _row(name: str, r: dict[str, Any]) -> None:
    cpu, digest = r["cpu"], r["digest"]
    print(f"{name:>12} {r['nodes']:>6} {r['pods']:>7} {r['jobs']:>5} {r['workers']:>7} "
          f"{min(cpu):>8.3f} {statistics.median(cpu):>8.3f}  {digest}", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    cap = sub.add_parser("capture", help="read a cluster and its history into FILE")
    cap.add_argument("kubeconfig", type=Path)
    cap.add_argument("file", type=Path)
    rep = sub.add_parser("replay", help="run_round on FILE")
    rep.add_argument("file", type=Path)
    rep.add_argument("--repeat", type=int, default=3)
    rep.add_argument("--profile", action="store_true")
    rep.add_argument("--top", type=int, default=25)
    rep.add_argument("--compare", metavar="REF", help="beside a git ref's edl_sizing")
    rep.add_argument("--rounds", type=int, default=2, help="--compare: turns per side")
    rep.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.command == "capture":
        print(f"captured {capture(args.kubeconfig, args.file)}")
        return
    if args.json:
        print(json.dumps(replay(args.file, args.repeat, False, 0)))
        return
    header = f"{'side':>12} {'nodes':>6} {'pods':>7} {'jobs':>5} {'workers':>7} " \
             f"{'best s':>8} {'median s':>8}  plan"  # fmt: skip
    if args.compare is None:
        print(header)
        _row("this tree", replay(args.file, args.repeat, args.profile, args.top))
        return
    from bench.git_ref import export_packages

    with tempfile.TemporaryDirectory(prefix="edl-capture-") as tmp:
        code = Path(tmp)
        export_packages(args.compare, code, "edl_sizing")
        sides: dict[str, list[dict[str, Any]]] = {args.compare: [], "this tree": []}
        for turn in range(args.rounds):
            order = [(args.compare, code), ("this tree", None)]
            for name, where in order if turn % 2 == 0 else order[::-1]:
                sides[name].append(_child(where, args.file, args.repeat))
        print(header)
        for name, runs in sides.items():
            merged = dict(runs[-1], cpu=[c for r in runs for c in r["cpu"]])
            _row(name, merged)
        digests = {r["digest"] for runs in sides.values() for r in runs}
        print("same plan: " + ("yes" if len(digests) == 1 else f"NO ({sorted(digests)})"))


if __name__ == "__main__":
    main()
