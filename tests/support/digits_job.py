"""The elastic digits job of the integration layer: agents on a local membership store.

Real `edl-agent run --elastic` processes on 127.0.0.1 training the elastic digits example
(Paddle or PyTorch); used by the integration tests, the soak driver, the e2e elastic tests
(the constants) and the benches.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from agent.protocol.control import Timings
from agent.trainer.step_gate import UNLIMITED, StepGate
from tests.support.net import free_port

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
EPOCHS = 10
TRAIN_ARGS = ["--epochs", str(EPOCHS), "--global-batch", "64", "--seed", "3"]
NUM_TRAIN = 1437  # 80 % of sklearn's 1797 digits
SCRIPTS = {
    "paddle": "examples.train_digits_elastic",
    "torch": "examples.train_digits_torch_elastic",
    "paddle-dp": "examples.train_digits_paddle_dp_elastic",
    "torch-ddp": "examples.train_digits_ddp_elastic",
}
"""The elastic digits examples: sample ids and an explicit all-reduce per framework, and the
DataLoader + data-parallel model scripts (`-dp`, `-ddp`)."""
FRAMEWORK_OF = {"paddle": "paddle", "torch": "torch", "paddle-dp": "paddle", "torch-ddp": "torch"}
"""Which framework each example trains with."""
SCRIPT_ARGS = {"paddle-dp": ["--workers", "2"], "torch-ddp": ["--workers", "2"]}
"""Per example, what it gets besides `TRAIN_ARGS`: DataLoader workers on."""
LOG_TAIL = 25
"""Lines of an exited agent's log that `Job.describe` shows."""


def script_args(script: str) -> list[str]:
    """The extra arguments of the example module `script` (`SCRIPT_ARGS`)."""
    return next((SCRIPT_ARGS.get(k, []) for k, v in SCRIPTS.items() if v == script), [])


class Job:
    """Agents of one elastic job on a local membership store, started and stopped by a test."""

    def __init__(
        self,
        tmp: Path,
        train_args: list[str] = TRAIN_ARGS,
        step_sleep: float = 0.1,
        script: str = SCRIPTS["paddle"],
        allowed_steps: int = UNLIMITED,
    ) -> None:
        """`allowed_steps`: the job's step gate starts there (`allow`, `release` move it)."""
        self.tmp = tmp
        self.script = script
        self.train_args = train_args
        self.step_sleep = step_sleep
        self.store = tmp / "store"
        self.ledger = tmp / "ledger"
        self.result = tmp / "result.json"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: dict[str, int] = {}
        self.extra_env: dict[str, str] = {}
        """Set in every agent this job starts."""
        self.gate = StepGate(tmp / "step-gate")
        """How many global steps the job may take (the trainers' ``EDL_STEP_GATE``): a test
        holds the job with it so that the job cannot finish before the test's events are done."""
        tmp.mkdir(parents=True, exist_ok=True)
        self.gate.allow(allowed_steps)

    def start(self, name: str, on_finished: str = "exit", **extra_env: str) -> None:
        """Starts agent `name`; by default it exits 0 once the job is done (as a Job would)."""
        port = free_port()
        env = {
            **os.environ,
            "EDL_MEMBER_ID": name,
            "EDL_ELASTIC_DIR": str(self.tmp / name),
            "EDL_SAMPLE_LEDGER": str(self.ledger),
            "EDL_STEP_GATE": str(self.gate.path),
            "EDL_DEBOUNCE": "2",
            "EDL_HEARTBEAT_INTERVAL": "1",
            "EDL_MEMBER_TTL": "8",
            "EDL_DRAIN_TIMEOUT": "30",
            # A bound for a trainer that never joins, not a speed: on a loaded 2-core box a
            # trainer's framework import alone has taken over 90 s.
            "EDL_INIT_TIMEOUT": "600",
            "PYTHONPATH": str(ROOT),
            **self.extra_env,
            **extra_env,
        }
        cmd = [PY, "-m", "agent", "run", "--host", "127.0.0.1", "--port", str(port),
               "--elastic", "--job", "digits", "--membership", f"local:{self.store}",
               "--min", "1", "--max", "4", "--on-finished", on_finished, "--",
               PY, "-m", self.script, *self.train_args, *script_args(self.script),
               "--step-sleep", str(self.step_sleep), "--result", str(self.result)]  # fmt: skip
        log = open(self.tmp / f"{name}.log", "wb")
        self.procs[name] = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=log)
        self.ports[name] = port

    def describe(self) -> str:
        """For `wait_for(describe=...)`: each agent's exit status (None: still running) and
        the end of every exited agent's log, so that a failure says why the agent ended."""
        states = {n: p.poll() for n, p in self.procs.items()}
        lines = [f"agents {states}"]
        for name, code in states.items():
            if code is None:
                continue
            try:
                log = (self.tmp / f"{name}.log").read_text(errors="replace")
                tail = log.splitlines()[-LOG_TAIL:]
            except OSError as e:
                tail = [f"(no log: {e})"]
            lines += [f"--- agent {name} exited {code}; the end of its log:", *tail]
        return "\n".join(lines)

    def world(self) -> tuple[int, int]:
        try:
            raw = json.loads((self.store / "digits" / "world.json").read_text())
            return int(raw["generation"]), len(raw["members"])
        except (OSError, ValueError, KeyError):
            return 0, 0

    def steps_done(self) -> int:
        """The highest global step any trainer has started (from the ledger)."""
        best = -1
        for path in self.ledger.glob("ledger-*.jsonl"):
            for line in path.read_text().splitlines():
                if '"s":' in line:
                    best = max(best, int(json.loads(line)["s"]))
        return best

    def trained_in(self, generation: int) -> int:
        """How many steps rank 0 of `generation` has started (from the ledger)."""
        return sum(
            path.read_text().count('"s":')
            for path in self.ledger.glob(f"ledger-*-g{generation}-r0-*.jsonl")
        )

    def allow(self, steps: int) -> None:
        """Lets the job train until `steps` global steps are done, then hold (never lowers)."""
        self.gate.allow(max(steps, self.gate.allowed()))

    def allow_more(self, steps: int) -> None:
        """Lets the job train `steps` steps past the highest one started so far."""
        self.allow(self.steps_done() + 1 + steps)

    def at_gate(self) -> bool:
        """The job has started every step the gate allows (it holds, or is about to)."""
        return self.steps_done() + 1 >= self.gate.allowed()

    def trained(self, size: int, steps: int) -> bool:
        """The world is of `size` and its generation trained `steps` steps (the ledger's).

        For a job held at its gate between a test's events: once the awaited world is there
        and at the gate, the gate lets it train what it needs and 10 steps more, so that the
        test's next event lands while it trains, and no world trains the job to its end.
        """
        gen, n = self.world()
        if n != size:
            return False
        done = self.trained_in(gen)
        if done < steps and self.at_gate():
            self.allow_more(steps - done + 10)
        return done >= steps

    def release(self) -> None:
        """Opens the gate: the job trains to its end."""
        self.gate.allow_all()

    def timings(self) -> list[Timings]:
        """Every generation's timings reported by every trainer of this job."""
        found = []
        for path in self.tmp.glob("*/control/timings-g*.json"):
            found.append(Timings.from_json(path.read_text()))
        return found

    def trainer_of(self, name: str) -> psutil.Process:
        kids = psutil.Process(self.procs[name].pid).children()
        assert kids, f"{name} has no trainer"
        return kids[0]

    def metrics(self, name: str) -> str:
        url = f"http://127.0.0.1:{self.ports[name]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            text: str = resp.read().decode()
            return text

    def readyz(self, name: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.ports[name]}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return 0, ""

    def ledger_lines(self) -> int:
        return sum(len(p.read_text().splitlines()) for p in self.ledger.glob("ledger-*.jsonl"))

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        for trainer in psutil.process_iter(["cmdline"]):
            cmd = trainer.info["cmdline"] or []
            if self.script in cmd and str(self.result) in cmd:
                trainer.kill()


def reference_accuracy(
    tmp: Path, train_args: list[str] = TRAIN_ARGS, script: str = SCRIPTS["paddle"]
) -> float:
    out = tmp / "reference.json"
    done = subprocess.run(
        [PY, "-m", script, *train_args, *script_args(script), "--result", str(out)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False, timeout=300,
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:  # its own words, not only the status (once: a full disk)
        raise AssertionError(
            f"the one-process reference run exited {done.returncode}: {done.stderr[-2000:]}"
        )
    return float(json.loads(out.read_text())["accuracy"])
