"""Rescale pause of elastic training over sequences of events, inside and outside views.

Real agents (`edl-agent run --elastic`, local membership) and real Paddle gloo on 127.0.0.1,
training the elastic digits example, in both re-init modes. Two sequences per mode:

- *planned*: `--rounds` x (scale-up 2->3, SIGTERM 3->2), then a trainer SIGKILL; per event
  kind the min / median / max of the pause the surviving agent recorded
  (`edl_trainer_rescale_pause_seconds`: from when training stood still to the first step at
  the new size), of its phases (`edl_trainer_rescale_phase_seconds_total{phase}`), and of the
  outside view (the bench's action -> first step at the new size);
- *faults*: the seeded soak of tests/integration/elastic_soak.py (joins, SIGTERMs, trainer,
  agent and pod SIGKILLs, a SIGSTOPped trainer, some fired mid-rescale): min / median / p90 /
  max of every recorded pause and of every action's outside view.

With ``--paddle`` (needs an etcd binary under ~/.cache/edl/controlplane and the python
`etcd3` package on EDL_ETCD3_PYTHONPATH) it also runs Paddle's own elastic launcher
(``--master etcd://... --nnodes 2:3 --elastic_level 1``) through scale-up 2->3 and SIGTERM
3->2, `--paddle-rounds` times, timed from the outside by a toy trainer that prints a line per
step, and says what happened when no step came (which launchers exited, with what).
Figures are printed, never asserted.
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
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.integration.elastic_soak import SoakSettings, report, run_soak  # noqa: E402

PY = sys.executable
PHASES = ("detect", "drain", "rendezvous", "init", "restore")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


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
    def __init__(self, tmp: Path, debounce: float, reinit: str) -> None:
        self.tmp = tmp
        self.reinit = reinit
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
            "EDL_AGENT_LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),
        }
        cmd = [PY, "-m", "agent", "run", "--host", "127.0.0.1", "--port", str(port),
               "--elastic", "--job", "bench", "--membership", f"local:{self.tmp / 'store'}",
               "--min", "1", "--max", "8", "--",
               PY, "-m", "examples.train_digits_elastic", "--epochs", "400",
               "--step-sleep", "0.02"]  # fmt: skip
        log = open(self.tmp / f"{name}.log", "wb")
        self.procs[name] = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=log)
        self.ports[name] = port

    def world(self) -> tuple[int, int]:
        try:
            raw = json.loads((self.tmp / "store" / "bench" / "world.json").read_text())
            return int(raw["generation"]), len(raw["members"])
        except (OSError, ValueError, KeyError):
            return 0, 0

    def first_step(self, name: str, generation: int) -> float | None:
        path = self.tmp / name / "control" / f"timings-g{generation}.json"
        try:
            value = json.loads(path.read_text()).get("first_step")
        except (OSError, ValueError):
            return None
        return float(value) if value is not None else None

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
    agents: Agents, action: Callable[[], object], size: int, watcher: str = "a"
) -> dict[str, float]:
    before = scrape(agents.ports[watcher])
    t0 = time.time()
    action()
    wait_for(f"world of {size}", lambda: agents.world()[1] == size, 120)
    gen = agents.world()[0]
    wait_for("first step", lambda: agents.first_step(watcher, gen) is not None, 180)
    key = "edl_trainer_rescales_total"
    wait_for("the rescale record", lambda: scrape(agents.ports[watcher])[key] > before[key], 30)
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
    return row


def bench_edl(
    tmp: Path, debounce: float, rounds: int, reinit: str
) -> list[tuple[str, dict[str, float]]]:
    agents = Agents(tmp, debounce, reinit)
    rows: list[tuple[str, dict[str, float]]] = []
    try:
        agents.start("a")
        agents.start("b")
        wait_for("world of 2", lambda: agents.world()[1] == 2, 120)
        wait_for("training", lambda: agents.first_step("a", agents.world()[0]) is not None, 180)
        for r in range(rounds):
            joiner = f"c{r}"
            join = functools.partial(agents.start, joiner)
            rows.append(("up 2->3", measure_event(agents, join, 3)))
            time.sleep(1)
            leave = functools.partial(agents.procs[joiner].send_signal, signal.SIGTERM)
            rows.append(("down 3->2 SIGTERM", measure_event(agents, leave, 2)))
            agents.procs[joiner].wait(60)
            time.sleep(1)
        rows.append(("up 2->3", measure_event(agents, functools.partial(agents.start, "d"), 3)))
        time.sleep(1)
        kill = functools.partial(os.kill, agents.trainer_pid("d"), signal.SIGKILL)
        rows.append(("down 3->2 trainer SIGKILL", measure_event(agents, kill, 2)))
    finally:
        agents.stop()
    return rows


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
) -> tuple[list[tuple[str, dict[str, float]]], list[str]]:
    """Paddle's launcher through `rounds` x (up 2->3, SIGTERM 3->2); rows and what happened."""
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

    def outcome(event: str) -> str:
        """Which launchers are gone, with their status and last telling log line."""
        parts = []
        for name, proc in sorted(launchers.items()):
            if proc.poll() is None:
                continue
            log = (tmp / f"launcher-{name}.log").read_text(errors="replace").splitlines()
            told = [x for x in log if re.search(r"not ready|Exit code|exit|[Ee]rror", x)]
            last = told[-1].strip()[:120] if told else "(no message)"
            parts.append(f"{name} exited {proc.returncode}: {last}")
        return f"{event}: " + ("; ".join(parts) or "all launchers still running, no step")

    rows: list[tuple[str, dict[str, float]]] = []
    notes: list[str] = []
    try:
        time.sleep(1)
        launch("a")
        launch("b")
        wait_for("paddle world of 2", lambda: first_at(2, 0) is not None, 180)
        for r in range(rounds):
            joiner = f"c{r}"

            def leave(name: str = joiner) -> None:  # the launcher alone, as a pod's PID 1 would
                os.kill(launchers[name].pid, signal.SIGTERM)

            events: list[tuple[str, Callable[[], None], int]] = [
                ("up 2->3", functools.partial(launch, joiner), 3),
                ("down 3->2 SIGTERM", leave, 2),
            ]
            for event, act, size in events:
                time.sleep(2)
                t0 = time.time()
                act()
                try:
                    wait_for(
                        f"paddle world of {size}",
                        lambda size=size, t0=t0: first_at(size, t0) is not None,  # type: ignore[misc]
                        150,
                    )
                    rows.append((event, {"outside": (first_at(size, t0) or 0) - t0}))
                except TimeoutError:
                    notes.append(f"round {r + 1}, {outcome(event)}")
                    rows.append((event, {"outside": float("nan")}))
            if all(p.poll() is not None for n, p in launchers.items() if n in ("a", "b")):
                notes.append(f"round {r + 1}: both original launchers are gone; stopping here")
                break
    finally:
        for proc in launchers.values():
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        etcd_proc.kill()
        etcd_proc.wait(10)
    return rows, notes


def show(title: str, rows: list[tuple[str, dict[str, float]]]) -> None:
    """Per event kind: n, then min / median / max of the outside view, the pause and phases."""
    print(f"\n{title}")
    cols = ("outside", "pause", *PHASES)
    print(f"{'event (min/median/max s)':28s} {'n':>2s}" + "".join(f"{c:>18s}" for c in cols))
    for event in dict.fromkeys(e for e, _ in rows):
        got = [row for e, row in rows if e == event]
        cells = []
        for c in cols:
            values = sorted(row[c] for row in got if c in row and row[c] == row[c])
            if not values:
                cells.append(f"{'-':>18s}")
                continue
            med = statistics.median(values)
            cells.append(f"{values[0]:6.2f}/{med:5.2f}/{values[-1]:5.2f}".rjust(18))
        print(f"{event:28s} {len(got):2d}" + "".join(cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--debounce", type=float, default=1.0)
    parser.add_argument("--soak-seed", type=int, default=1, help="seed of the fault sequence")
    parser.add_argument("--soak-epochs", type=int, default=40)
    parser.add_argument("--no-soak", action="store_true", help="skip the fault sequence")
    parser.add_argument("--paddle", action="store_true", help="also time Paddle's launcher")
    parser.add_argument("--paddle-only", action="store_true", help="only Paddle's launcher")
    parser.add_argument("--paddle-rounds", type=int, default=2)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="edl-bench-rescale-"))
    try:  # logs are kept when a run fails
        print(f"seconds; debounce {args.debounce} s; 'outside' = action -> first step at new size")
        for reinit, title in (("auto", "in-process if possible"), ("process", "restarts")):
            if args.paddle_only:
                break
            rows = bench_edl(tmp / f"edl-{reinit}", args.debounce, args.rounds, reinit)
            show(f"EDL agent, EDL_REINIT={reinit} ({title}), planned events", rows)
            if not args.no_soak:
                settings = SoakSettings(args.soak_seed, reinit, epochs=args.soak_epochs)
                print()
                print(report(run_soak(tmp / f"soak-{reinit}", settings, log=lambda _: None)))
        if args.paddle or args.paddle_only:
            etcds = sorted(glob.glob(os.path.expanduser("~/.cache/edl/controlplane/*/bin/etcd")))
            extra = os.environ.get("EDL_ETCD3_PYTHONPATH", "")
            if not etcds or not extra:
                print("\nPaddle launcher: skipped (no etcd binary or EDL_ETCD3_PYTHONPATH)")
            else:
                rows, notes = bench_paddle(tmp / "paddle", etcds[-1], extra, args.paddle_rounds)
                show("Paddle launcher --elastic_level 1", rows)
                for note in notes:
                    print(f"  {note}")
    except TimeoutError as e:
        print(f"bench: {e}; logs kept in {tmp}")
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
