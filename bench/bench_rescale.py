"""Rescale pause of elastic training over sequences of events, inside and outside views.

Real agents (`edl-agent run --elastic`, local membership) and a real gloo collective on
127.0.0.1, training the elastic digits example of each framework (Paddle and PyTorch, the same
MLP), in both re-init modes. Per event kind, over `--rounds` rounds of scale-up 2->3 and
SIGTERM 3->2 plus a trainer SIGKILL, it prints min / median / max of the pause the surviving
agent recorded (`edl_trainer_rescale_pause_seconds`: from when training stood still to the
first step at the new size), of its phases (`edl_trainer_rescale_phase_seconds_total{phase}`),
and of the outside view: the bench's action (start / SIGTERM / SIGKILL) -> first step at the
new size. Beside them, from outside the agent too: ``ledger``, the watching survivor's pause as
its sample-ledger lines show it (tests/support/pause_monitor.py); for a join ``decided``, the
new world's write -> first step at the new size, and ``imported``, the joiner's framework
imported (its warm trainer ready) -> first step, ``spawned``, the joiner's agent process start ->
its trainer process start (the agent's own start-up before it, process create times to 10 ms),
and ``warm-up``, that trainer's start -> ready; for a SIGTERM ``gone``, SIGTERM -> the leaving
agent's exit (what frees a pod). Then, per mode, the seeded fault sequence of
tests/support/elastic_soak.py (joins, SIGTERMs, trainer / agent / pod SIGKILLs, a SIGSTOPped
trainer, kills mid-rescale): min / median / p90 / max of every recorded pause and of every
action's outside view.

Beside them, PyTorch's own elastic launcher (``torchrun --nnodes 2:3 --rdzv-backend c10d``)
runs the same digits MLP through the same scale-up and SIGTERM scale-down, timed from outside
by the workers' per-step lines (torchrun restarts every worker on a membership change; the
worker would have to checkpoint and reload itself to keep its progress, this one does not).

With ``--paddle`` (needs an etcd binary under ~/.cache/edl/controlplane and the python
`etcd3` package on EDL_ETCD3_PYTHONPATH) it also runs Paddle's own elastic launcher
(``--master etcd://... --nnodes 2:3 --elastic_level 1``) through the same events, timed from
the outside by a toy trainer that prints a line per step, `--paddle-rounds` times; when no
step at the new size comes, it says which launchers exited, with what. Figures are printed,
never asserted.
"""

from __future__ import annotations

import argparse
import functools
import glob
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support.elastic_soak import SoakSettings, report, run_soak  # noqa: E402
from tests.support.net import free_port  # noqa: E402
from tests.support.pause_monitor import ledger_pause, step_starts  # noqa: E402
from tests.support.waiting import WaitTimeout, wait_for  # noqa: E402

PY = sys.executable
PHASES = ("detect", "drain", "rendezvous", "init", "restore")
EXTRA = ("ledger", "decided", "imported", "spawned", "warm-up", "gone")
"""Columns measured from outside the agent's record (see the module docstring)."""


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(edl_trainer_rescale\S*) ([0-9.e+-]+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


class Agents:
    def __init__(
        self,
        tmp: Path,
        debounce: float,
        reinit: str,
        script: str,
        extra: tuple[str, ...] = (),
        min_world: int = 1,
        epochs: int = 400,
        step_sleep: float = 0.02,
        root: Path = ROOT,
    ) -> None:
        self.tmp = tmp
        self.root = root
        """The source tree the agents and trainers run (bench_ddp --baseline: another one)."""
        self.reinit = reinit
        self.script = script
        self.extra = extra
        """More trainer arguments (bench_handoff: ``--hidden N``)."""
        self.min_world = min_world
        """The job trains only in worlds this large (bench_ddp: a fixed world)."""
        self.epochs = epochs
        self.step_sleep = step_sleep
        tmp.mkdir(parents=True, exist_ok=True)
        self.debounce = debounce
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: dict[str, int] = {}

    def start(self, name: str) -> None:
        port = free_port()
        env = {
            **os.environ,
            "EDL_MEMBER_ID": name,
            "EDL_ELASTIC_DIR": str(self.tmp / name),
            "EDL_DEBOUNCE": str(self.debounce),
            "EDL_REINIT": self.reinit,
            "EDL_AGENT_LOG_LEVEL": os.environ.get("EDL_AGENT_LOG_LEVEL", "WARNING"),
            "EDL_SAMPLE_LEDGER": str(self.tmp / "ledger"),
            "PYTHONPATH": str(self.root),
        }
        cmd = [PY, "-m", "agent", "run", "--host", "127.0.0.1", "--port", str(port),
               "--elastic", "--job", "bench", "--membership", f"local:{self.tmp / 'store'}",
               "--min", str(self.min_world), "--max", "8", "--",
               PY, "-m", self.script, "--epochs", str(self.epochs),
               "--step-sleep", str(self.step_sleep), *self.extra]  # fmt: skip
        log = open(self.tmp / f"{name}.log", "wb")
        self.procs[name] = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=log, stderr=log)
        self.ports[name] = port

    def start_training(self, names: tuple[str, ...], timeout_s: float) -> None:
        """Starts agents `names` and waits until they form one world and the first trains."""
        for name in names:
            self.start(name)
        wait_for(
            lambda: self.world()[1] == len(names),
            timeout_s=timeout_s,
            what=f"world of {len(names)}",
            interval_s=0.05,
        )
        wait_for(
            lambda: self.first_step(names[0], self.world()[0]) is not None,
            timeout_s=timeout_s,
            what="training",
            interval_s=0.05,
        )

    def world(self) -> tuple[int, int]:
        try:
            raw = json.loads((self.tmp / "store" / "bench" / "world.json").read_text())
            return int(raw["generation"]), len(raw["members"])
        except (OSError, ValueError, KeyError):
            return 0, 0

    def first_step(self, name: str, generation: int) -> float | None:
        return self.milestone(name, generation, "first_step")

    def milestone(self, name: str, generation: int, which: str) -> float | None:
        path = self.tmp / name / "control" / f"timings-g{generation}.json"
        try:
            value = json.loads(path.read_text()).get(which)
        except (OSError, ValueError):
            return None
        return float(value) if value is not None else None

    def start_up(self, name: str, imported: float | None) -> dict[str, float]:
        """``spawned``: agent `name`'s process start -> its trainer's (the agent's own start-up
        before it); ``warm-up``: the trainer's start -> ready (its framework imported)."""
        try:
            agent = psutil.Process(self.procs[name].pid)
            trainer = agent.children()[0].create_time()
            out = {"spawned": trainer - agent.create_time()}
        except (psutil.Error, IndexError):
            return {}
        if imported is not None:
            out["warm-up"] = imported - trainer
        return out

    def world_written(self) -> float:
        """When the current world record was written (its rename keeps the write's mtime)."""
        return (self.tmp / "store" / "bench" / "world.json").stat().st_mtime

    def trainer_pid(self, name: str) -> int:
        return int(psutil.Process(self.procs[name].pid).children()[0].pid)

    def stop(self) -> None:
        """Kills what this bench started, by pid: each agent's trainer group, then the agent."""
        for proc in self.procs.values():
            if proc.poll() is not None:
                continue
            for child in psutil.Process(proc.pid).children():
                try:
                    os.killpg(child.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.kill()
            proc.wait(10)


def measure_event(
    agents: Agents,
    action: Callable[[], object],
    size: int,
    watcher: str = "a",
    joiner: str = "",
    leaver: str = "",
) -> dict[str, float]:
    before = scrape(agents.ports[watcher])
    from_gen = agents.world()[0]
    ended: list[float] = []
    if leaver:
        proc = agents.procs[leaver]
        reaper = threading.Thread(target=_reap, args=(proc, ended))
        reaper.start()
    t0 = time.time()
    action()
    wait_for(
        lambda: agents.world()[1] == size, timeout_s=120, what=f"world of {size}", interval_s=0.05
    )
    gen = agents.world()[0]
    written = agents.world_written()
    wait_for(
        lambda: agents.first_step(watcher, gen) is not None,
        timeout_s=180,
        what="first step",
        interval_s=0.05,
    )
    key = "edl_trainer_rescales_total"
    wait_for(
        lambda: scrape(agents.ports[watcher])[key] > before[key],
        timeout_s=30,
        what="the rescale record",
        interval_s=0.05,
    )
    after = scrape(agents.ports[watcher])
    first = agents.first_step(watcher, gen)
    assert first is not None
    row = {
        "outside": first - t0,
        "pause": after["edl_trainer_rescale_pause_seconds_sum"]
        - before["edl_trainer_rescale_pause_seconds_sum"],
    }
    for phase in PHASES:
        name = f'edl_trainer_rescale_phase_seconds_total{{phase="{phase}"}}'
        row[phase] = after.get(name, 0.0) - before.get(name, 0.0)
    seen = ledger_pause(step_starts(agents.tmp / "ledger"), watcher, from_gen, gen)
    if seen is not None:
        row["ledger"] = seen.gap
    if joiner:
        row["decided"] = first - written
        imported = agents.milestone(joiner, 0, "imported")
        if imported is not None:
            row["imported"] = first - imported
        row.update(agents.start_up(joiner, imported))
    if leaver:
        reaper.join(150)
        if ended:
            row["gone"] = ended[0] - t0
    return row


def _reap(proc: subprocess.Popen[bytes], ended: list[float]) -> None:
    """Waits for `proc` to end and notes when (the wait returns at its exit)."""
    try:
        proc.wait(150)
    except subprocess.TimeoutExpired:
        return
    ended.append(time.time())


def ups_and_downs(
    agents: Agents, rounds: int, leave_wait_s: float = 60
) -> list[tuple[str, dict[str, float]]]:
    """`rounds` times, on a training world of 2: a joiner (2 -> 3), then its SIGTERM (3 -> 2)."""
    rows: list[tuple[str, dict[str, float]]] = []
    for r in range(rounds):
        joiner = f"c{r}"
        join = functools.partial(agents.start, joiner)
        rows.append(("up 2->3", measure_event(agents, join, 3, joiner=joiner)))
        time.sleep(1)
        leave = functools.partial(agents.procs[joiner].send_signal, signal.SIGTERM)
        rows.append(("down 3->2 SIGTERM", measure_event(agents, leave, 2, leaver=joiner)))
        agents.procs[joiner].wait(leave_wait_s)
        time.sleep(1)
    return rows


def bench_edl(
    tmp: Path, debounce: float, rounds: int, reinit: str, script: str
) -> list[tuple[str, dict[str, float]]]:
    agents = Agents(tmp, debounce, reinit, script)
    rows: list[tuple[str, dict[str, float]]] = []
    try:
        agents.start_training(("a", "b"), timeout_s=180)
        rows += ups_and_downs(agents, rounds)
        join_d = functools.partial(agents.start, "d")
        rows.append(("up 2->3", measure_event(agents, join_d, 3, joiner="d")))
        time.sleep(1)
        kill = functools.partial(os.kill, agents.trainer_pid("d"), signal.SIGKILL)
        rows.append(("down 3->2 trainer SIGKILL", measure_event(agents, kill, 2)))
    finally:
        agents.stop()
    return rows


def has_step(first_at: Callable[[int, float], float | None], size: int, after: float) -> bool:
    return first_at(size, after) is not None


def launcher_events(
    who: str,
    launch: Callable[[str], None],
    nodes: dict[str, subprocess.Popen[bytes]],
    first_at: Callable[[int, float], float | None],
    rounds: int = 1,
    log_of: Callable[[str], Path] | None = None,
) -> list[tuple[str, dict[str, float]]]:
    """Another launcher's nodes a, b training, then `rounds` x (c's scale-up 2->3 and its
    SIGTERM scale-down 3->2, to the launcher alone, as a pod's PID 1 would get it), each timed
    from the action to the first step at the new size (`first_at(size, after)`); when none
    comes, which nodes exited and their last telling log line (`log_of(name)`)."""
    launch("a")
    launch("b")
    wait_for(
        lambda: first_at(2, 0) is not None, timeout_s=180, what=f"{who} world of 2", interval_s=0.05
    )
    rows: list[tuple[str, dict[str, float]]] = []
    for r in range(rounds):
        joiner = f"c{r}" if rounds > 1 else "c"

        def leave(name: str = joiner) -> None:  # it exists once the scale-up has started it
            os.kill(nodes[name].pid, signal.SIGTERM)

        join = functools.partial(launch, joiner)
        for event, act, size in (("up 2->3", join, 3), ("down 3->2 SIGTERM", leave, 2)):
            time.sleep(2)
            t0 = time.time()
            act()
            try:
                stepped = functools.partial(has_step, first_at, size, t0)
                wait_for(stepped, timeout_s=150, what=f"{who} world of {size}", interval_s=0.05)
                rows.append((event, {"outside": (first_at(size, t0) or 0) - t0}))
            except TimeoutError as e:
                print(f"{who}, round {r + 1}, {event}: {e}; {exits(nodes, log_of)}")
                rows.append((event, {"outside": float("nan")}))
        if all(nodes[n].poll() is not None for n in ("a", "b")):
            print(f"{who}: both first nodes are gone after round {r + 1}; stopping there")
            break
    return rows


def exits(nodes: dict[str, subprocess.Popen[bytes]], log_of: Callable[[str], Path] | None) -> str:
    """Which nodes exited, with their status and last line saying why (if a log is known)."""
    parts = []
    for name, proc in sorted(nodes.items()):
        if proc.poll() is None:
            continue
        why = ""
        if log_of is not None:
            lines = log_of(name).read_text(errors="replace").splitlines()
            told = [x.strip() for x in lines if re.search(r"not ready|[Ee]xit|[Ee]rror", x)]
            why = f" ({told[-1][:140]})" if told else ""
        parts.append(f"{name} exited {proc.returncode}{why}")
    return "; ".join(parts) or "every node still runs"


def kill_groups(procs: dict[str, subprocess.Popen[bytes]], workdir: Path) -> None:
    """SIGKILL to each launcher's process group (it runs in its own session), then to every
    process still running from `workdir`: torchrun's and Paddle's launchers start their
    workers in sessions of their own, and a launcher that exited leaves them orphaned (they
    trained on, two cores' worth, under every later figure of the run)."""
    for proc in procs.values():
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)
    strays = []
    for p in psutil.process_iter(["cmdline"]):
        if p.pid != os.getpid() and any(str(workdir) in a for a in p.info["cmdline"] or ()):
            strays.append(p)
    for p in strays:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(strays, timeout=10)


# -- Paddle's own elastic launcher --------------------------------------------------------------

TOY = """
import os, sys, time
import paddle, paddle.distributed as dist
dist.init_parallel_env()
n = dist.get_world_size()
x = paddle.ones([4])
while True:
    dist.all_reduce(x)
    print(f"STEP {n} {time.time():.3f}", flush=True)
    time.sleep(0.2)
"""


def bench_paddle(
    tmp: Path, etcd: str, extra_path: str, rounds: int
) -> list[tuple[str, dict[str, float]]]:
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    data = tmp / "etcd"
    etcd_proc = subprocess.Popen(
        [etcd, "--data-dir", str(data), "--listen-client-urls", f"http://127.0.0.1:{port}",
         "--advertise-client-urls", f"http://127.0.0.1:{port}",
         "--listen-peer-urls", f"http://127.0.0.1:{free_port()}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    toy = tmp / "toy.py"
    toy.write_text(TOY)
    env = {
        **os.environ,
        "PYTHONPATH": extra_path,
        "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python",
    }
    launchers: dict[str, subprocess.Popen[bytes]] = {}

    def launch(name: str) -> None:
        cmd = [PY, "-m", "paddle.distributed.launch", "--master", f"etcd://127.0.0.1:{port}",
               "--nnodes", "2:3", "--nproc_per_node", "1", "--elastic_level", "1",
               "--elastic_timeout", "30", "--max_restart", "10", "--job_id", "bench",
               "--log_dir", str(tmp / f"log-{name}"), str(toy)]  # fmt: skip
        out = open(tmp / f"launcher-{name}.log", "wb")
        launchers[name] = subprocess.Popen(
            cmd, cwd=tmp, env=env, stdout=out, stderr=out, start_new_session=True
        )

    def steps() -> list[tuple[int, float]]:
        out = []
        for path in glob.glob(str(tmp / "log-*" / "workerlog.*")):
            for line in Path(path).read_text(errors="replace").splitlines():
                if line.startswith("STEP "):
                    _, n, t = line.split()
                    out.append((int(n), float(t)))
        return out

    def first_at(size: int, after: float) -> float | None:
        times = [t for n, t in steps() if n == size and t > after]
        return min(times) if times else None

    try:
        time.sleep(1)
        return launcher_events(
            "Paddle launcher",
            launch,
            launchers,
            first_at,
            rounds,
            lambda name: tmp / f"launcher-{name}.log",
        )
    finally:
        kill_groups(launchers, tmp)
        etcd_proc.kill()
        etcd_proc.wait(10)


# -- torchrun's own elastic restart -----------------------------------------------------------

TORCHRUN_WORKER = """
import os, sys, time
import numpy as np, torch, torch.distributed as dist
sys.path.insert(0, os.environ["EDL_BENCH_ROOT"])
from examples.digits_data import load_data
from examples.train_digits_torch import build_model
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, n = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
x, y, _, _ = load_data(0)
model = build_model(64)
opt = torch.optim.Adam(model.parameters(), lr=0.01)
rng = np.random.default_rng(rank)
while True:
    idx = rng.integers(0, len(x), 64 // n)
    loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x[idx])),
                                             torch.from_numpy(y[idx]))
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= n
    opt.step(); opt.zero_grad()
    print(f"STEP {n} {time.time():.3f}", flush=True)
    time.sleep(0.02)
"""


def bench_torchrun(tmp: Path) -> list[tuple[str, dict[str, float]]]:
    tmp.mkdir(parents=True, exist_ok=True)
    worker = tmp / "worker.py"
    worker.write_text(TORCHRUN_WORKER)
    endpoint = f"127.0.0.1:{free_port()}"
    # With torch 2.15's default (the rendezvous store shared with the workers) the 2->3
    # re-rendezvous of three torchruns on one host deadlocked here (rank assignment waiting
    # 60 s for a MASTER_ADDR key, then every agent exiting); the legacy store works.
    env = {
        **os.environ,
        "EDL_BENCH_ROOT": str(ROOT),
        "PYTHONUNBUFFERED": "1",
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
    }
    nodes: dict[str, subprocess.Popen[bytes]] = {}

    def launch(name: str) -> None:
        cmd = [PY, "-m", "torch.distributed.run", "--nnodes", "2:3", "--nproc-per-node", "1",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "bench",
               "--max-restarts", "10", "--monitor-interval", "1", str(worker)]  # fmt: skip
        out = open(tmp / f"torchrun-{name}.log", "wb")
        nodes[name] = subprocess.Popen(
            cmd, cwd=tmp, env=env, stdout=out, stderr=out, start_new_session=True
        )

    def first_at(size: int, after: float) -> float | None:
        times = []
        for path in tmp.glob("torchrun-*.log"):
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("STEP ") and line.split()[1] == str(size):
                    t = float(line.split()[2])
                    if t > after:
                        times.append(t)
        return min(times) if times else None

    try:
        return launcher_events("torchrun", launch, nodes, first_at)
    finally:
        kill_groups(nodes, tmp)


def show(title: str, rows: list[tuple[str, dict[str, float]]]) -> None:
    """Per event kind: how many, then min / median / max of the outside view, pause and phases."""
    print(f"\n{title}")
    cols = ("outside", "pause", *EXTRA, *PHASES)
    print(f"{'event (min/median/max s)':28s} {'n':>2s}" + "".join(f"{c:>18s}" for c in cols))
    for event in dict.fromkeys(e for e, _ in rows):
        got = [row for e, row in rows if e == event]
        cells = []
        for c in cols:
            values = sorted(row[c] for row in got if c in row and row[c] == row[c])  # no NaN
            if not values:
                cells.append(f"{'-':>18s}")
                continue
            med = statistics.median(values)
            cells.append(f"{values[0]:.2f}/{med:.2f}/{values[-1]:.2f}".rjust(18))
        print(f"{event:28s} {len(got):2d}" + "".join(cells))


SCRIPTS = {
    "paddle": "examples.train_digits_elastic",
    "torch": "examples.train_digits_torch_elastic",
}


SUMMARY_ROWS = (*EXTRA, "detect")
"""Below each event's outside (pause) line, the median of each of these a setup measured."""
BASELINES = ("torchrun c10d", "Paddle launcher")
"""Setups the outside view is divided by, per event, when they ran."""


def _median(rows: list[dict[str, float]], key: str) -> float | None:
    values = [r[key] for r in rows if key in r and r[key] == r[key]]  # no NaN
    return statistics.median(values) if values else None


def summary(results: dict[str, list[tuple[str, dict[str, float]]]]) -> None:
    """One block per event, one column per setup: median outside (and pause) seconds, then
    the medians of `SUMMARY_ROWS` (ledger, decided -> step, imported -> step, gone, detect),
    then the outside view against each launcher that ran."""
    events = list(dict.fromkeys(e for rows in results.values() for e, _ in rows))
    print("\nside by side, median seconds: outside (pause); then, indented, the other views")
    print(f"{'event':28s}" + "".join(f"{name:>22s}" for name in results))
    for event in events:
        per = {name: [r for e, r in rows if e == event] for name, rows in results.items()}
        cells = []
        for got in per.values():
            outside, pause = _median(got, "outside"), _median(got, "pause")
            text = "-" if outside is None else f"{outside:.2f}"
            if outside is not None and pause is not None:
                text += f" ({pause:.2f})"
            cells.append(f"{text:>22s}")
        print(f"{event:28s}" + "".join(cells))
        for key in SUMMARY_ROWS:
            values = [_median(got, key) for got in per.values()]
            if any(v is not None for v in values):
                texts = ["-" if v is None else f"{v:.2f}" for v in values]
                print(f"{'  ' + key:28s}" + "".join(f"{t:>22s}" for t in texts))
        for base in BASELINES:
            ref = _median(per.get(base, []), "outside")
            if not ref:
                continue
            ratios = [_median(got, "outside") for got in per.values()]
            texts = ["-" if v is None else f"{v / ref:.2f}" for v in ratios]
            print(f"{'  outside / ' + base:28s}" + "".join(f"{t:>22s}" for t in texts))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--debounce", type=float, default=1.0)
    parser.add_argument("--frameworks", default="paddle,torch", help="EDL runs, comma separated")
    parser.add_argument("--modes", default="auto,process", help="EDL_REINIT modes, comma separated")
    parser.add_argument("--no-torchrun", action="store_true", help="skip torchrun's own elastic")
    parser.add_argument("--paddle", action="store_true", help="also time Paddle's launcher")
    parser.add_argument("--paddle-rounds", type=int, default=2)
    parser.add_argument("--soak-seed", type=int, default=19, help="seed of the fault sequence")
    parser.add_argument("--no-soak", action="store_true", help="skip the fault sequences")
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep every agent's and trainer's log"
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="edl-bench-rescale-"))
    results: dict[str, list[tuple[str, dict[str, float]]]] = {}
    try:  # logs are kept when a run fails
        print(f"seconds; debounce {args.debounce} s; 'outside' = action -> first step at new size")
        for framework in filter(None, args.frameworks.split(",")):  # "": launchers only
            titles = {"auto": "in-process if possible", "process": "restarts"}
            for reinit in filter(None, args.modes.split(",")):
                title = titles[reinit]
                rows = bench_edl(
                    tmp / f"edl-{framework}-{reinit}",
                    args.debounce,
                    args.rounds,
                    reinit,
                    SCRIPTS[framework],
                )
                show(f"EDL agent, {framework}, EDL_REINIT={reinit} ({title})", rows)
                results[f"EDL {framework} {reinit}"] = rows
                if not args.no_soak:
                    settings = SoakSettings(args.soak_seed, reinit, framework=framework)
                    soak = run_soak(tmp / f"soak-{framework}-{reinit}", settings, lambda _: None)
                    print(report(soak))
        if not args.no_torchrun:
            rows = bench_torchrun(tmp / "torchrun")
            show("torchrun --nnodes 2:3 --rdzv-backend c10d (restarts every worker)", rows)
            results["torchrun c10d"] = rows
        if args.paddle:
            etcds = sorted(glob.glob(os.path.expanduser("~/.cache/edl/controlplane/*/bin/etcd")))
            extra = os.environ.get("EDL_ETCD3_PYTHONPATH", "")
            if not etcds or not extra:
                print("\nPaddle launcher: skipped (no etcd binary or EDL_ETCD3_PYTHONPATH)")
            else:
                rows = bench_paddle(tmp / "paddle", etcds[-1], extra, args.paddle_rounds)
                show("Paddle launcher --elastic_level 1", rows)
                results["Paddle launcher"] = rows
        summary(results)
    except (TimeoutError, WaitTimeout) as e:
        summary(results)  # what was measured before the wait that ran out
        print(f"bench: {e}; logs kept in {tmp}")
        return 1
    if args.keep_logs:
        print(f"\nlogs kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
