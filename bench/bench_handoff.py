"""The state hand-off against the size of the state: a PyTorch in-process join 2->3 per size.

Real agents (`bench_rescale.Agents`: local membership, gloo on 127.0.0.1) train the elastic
digits example with its hidden layers widened until the model holds `--sizes` MB of float32
parameters (Adam keeps two more tensors of each: the state handed over is about three times
that). Per size and round, a third agent joins; printed (never asserted), from the watching
survivor's trainer reports (`timings-g*.json`, `agent.protocol.control.Timings`) and its
rescale record:

* ``state MB``: the survivor's local copy (`agent.trainer.state`), what is broadcast;
* ``save``: the survivor's last step in the old world -> its in-process re-init began (it waits
  for the new world; before issue 27's fourth round it pickled and wrote its local copy here
  first, now that copy is written behind the new world's first step);
* ``form``: that -> the new group formed (``initialised``);
* ``restore``: -> the hand-off done (``restored``): every rank agrees on the most advanced
  state, its holder pickles it, broadcasts it to every rank, each one loads it (the joiner also
  builds its model and optimizer after joining, in the script, before this ends);
* ``step``: -> the first step at the new size; ``pause``: the survivor's recorded pause.

    python bench/bench_handoff.py --sizes 1,10,100 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.bench_rescale import Agents, measure_event  # noqa: E402
from tests.support.waiting import WaitTimeout, wait_for  # noqa: E402

COLUMNS = ("state MB", "save", "form", "restore", "step", "pause")


def hidden_for(megabytes: float) -> int:
    """The hidden width h whose float32 parameters take `megabytes` MB.

    The digits MLP is 64 -> h -> h -> 10: h*h + 76*h + 10 parameters.
    """
    target = megabytes * 2**20 / 4
    return max(1, round((-76 + math.sqrt(76 * 76 - 4 * (10 - target))) / 2))


def timings(agents: Agents, name: str, generation: int) -> dict[str, float]:
    path = agents.tmp / name / "control" / f"timings-g{generation}.json"
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in raw.items() if isinstance(v, int | float)}


def join_once(agents: Agents, joiner: str) -> dict[str, float]:
    """One join 2->3 timed from the survivor `a`; the joiner is SIGTERMed after."""
    before = agents.world()[0]
    row = measure_event(agents, lambda: agents.start(joiner), 3, joiner=joiner)
    gen = agents.world()[0]
    old, new = timings(agents, "a", before), timings(agents, "a", gen)
    state = agents.tmp / "a" / "state" / "state.pkl"
    out = {"pause": row["pause"], "state MB": state.stat().st_size / 2**20}
    if "stopped" in old and "started" in new:
        out["save"] = new["started"] - old["stopped"]
    for col, (a, b) in {
        "form": ("started", "initialised"),
        "restore": ("initialised", "restored"),
        "step": ("restored", "first_step"),
    }.items():
        if a in new and b in new:
            out[col] = new[b] - new[a]
    agents.procs[joiner].send_signal(signal.SIGTERM)
    agents.procs[joiner].wait(120)
    wait_for(lambda: agents.world()[1] == 2, timeout_s=120, what="world of 2", interval_s=0.05)
    return out


def bench_size(tmp: Path, megabytes: float, rounds: int) -> list[dict[str, float]]:
    extra = ("--hidden", str(hidden_for(megabytes)))
    agents = Agents(tmp, 1.0, "auto", "examples.train_digits_torch_elastic", extra)
    rows = []
    try:
        agents.start_training(("a", "b"), timeout_s=300)
        for r in range(rounds):
            time.sleep(1)
            rows.append(join_once(agents, f"c{r}"))
    finally:
        agents.stop()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,10,100", help="MB of parameters, comma separated")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="edl-bench-handoff-"))
    print("PyTorch in-process join 2->3; seconds, medians (min-max) over the rounds")
    print(f"{'params MB':>10s}" + "".join(f"{c:>24s}" for c in COLUMNS))
    try:
        for size in (float(s) for s in args.sizes.split(",") if s):
            rows = bench_size(tmp / f"{size:g}MB", size, args.rounds)
            cells = []
            for col in COLUMNS:
                values = sorted(r[col] for r in rows if col in r)
                if not values:
                    cells.append(f"{'-':>24s}")
                    continue
                med = statistics.median(values)
                text = f"{med:.2f} ({values[0]:.2f}-{values[-1]:.2f})"
                cells.append(f"{text:>24s}")
            print(f"{size:>10g}" + "".join(cells), flush=True)
    except (TimeoutError, WaitTimeout) as e:
        print(f"bench: {e}; logs kept in {tmp}")
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
