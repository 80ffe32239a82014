"""SIGTERM -> container exit: a planned leave of a real trainer container (podman).

`bench_rescale.py`'s *gone* is the leaving agent *process*'s exit on this host. A pod is
gone when its container is: here the trainer image that `make images` builds runs under
podman (runc, host network, as tests/e2e/install does), two containers of one elastic job
sharing a local membership folder. Container ``a`` trains throughout; each round a container
``b<i>`` joins, trains at the new size, and gets SIGTERM (`podman kill --signal TERM`, what the
kubelet sends first). Per round:

* ``world``: SIGTERM -> the world without the leaver written (by the leaving agent, at once);
* ``exit``: SIGTERM -> the container has exited (`podman wait --interval 10ms` returned: the
  agent, its trainer and the runtime's teardown; a kubelet adds its status update and the API
  server's deletion, which EDL does not control);
* the container's exit status (0: the agent left cleanly).

Min / median / max in seconds over `--rounds`; printed, never asserted.

    python bench/bench_container_leave.py --rounds 5 [--image localhost/edl-trainer:0.1.0]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.harness.containers import containers_conf
from tests.support.net import free_port
from tests.support.waiting import wait_for

JOB = "leave"
TRAIN_SECONDS = 120.0
"""Bound on a container's start, import and first step at the new size (a bound, not a speed)."""


class Containers:
    """Trainer containers of one job under podman, removed at the end."""

    def __init__(self, image: str, work: Path, env: dict[str, str]) -> None:
        self.image, self.work, self.env = image, work, env
        self.names: list[str] = []

    def podman(self, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["podman", *args], env=self.env, capture_output=True, text=True,
            timeout=timeout_s, check=False,
        )  # fmt: skip

    def start(self, member: str) -> str:
        name = f"edl-bench-{member}-{uuid.uuid4().hex[:8]}"
        started = self.podman(
            "run", "-d", "--name", name, "--network", "host", "--pull", "never",
            "-v", f"{self.work}:/work", "-e", f"EDL_MEMBER_ID={member}",
            "-e", f"EDL_ELASTIC_DIR=/work/{member}", "-e", "TMPDIR=/work/tmp",
            self.image, "run", "--port", str(free_port()), "--metrics-dir", f"/work/{member}-m",
            "--elastic", "--job", JOB, "--membership", "local:/work/members",
            "--min", "1", "--max", "3", "--on-finished", "exit", "--",
            "python", "-m", "examples.train_digits_elastic", "--epochs", "100000",
            "--step-sleep", "0.05",
        )  # fmt: skip
        if started.returncode != 0:
            raise RuntimeError(f"podman run: {started.stderr.strip()}")
        self.names.append(name)
        return name

    def world(self) -> tuple[int, list[str]]:
        try:
            raw = json.loads((self.work / "members" / JOB / "world.json").read_text())
            return int(raw["generation"]), [str(m["id"]) for m in raw["members"]]
        except (OSError, ValueError, KeyError, TypeError):
            return 0, []

    def stepped(self, member: str, generation: int) -> bool:
        path = self.work / member / "control" / f"timings-g{generation}.json"
        try:
            return json.loads(path.read_text()).get("first_step") is not None
        except (OSError, ValueError):
            return False

    def trains(self, members: set[str]) -> bool:
        generation, current = self.world()
        return set(current) == members and all(self.stepped(m, generation) for m in members)

    def logs(self, name: str) -> str:
        return self.podman("logs", name).stderr[-2000:]

    def remove_all(self) -> None:
        for name in self.names:
            self.podman("rm", "--force", "--time", "0", "--ignore", name)


def one_leave(jobs: Containers, member: str) -> tuple[float, float, int]:
    """Starts `member`, waits until it trains beside ``a``, SIGTERMs it: (world, exit, status)."""
    name = jobs.start(member)
    wait_for(
        lambda: jobs.trains({"a", member}), timeout_s=TRAIN_SECONDS, interval_s=0.1,
        what=f"{member} training beside a", describe=lambda: jobs.logs(name),
    )  # fmt: skip
    time.sleep(1.0)  # a few steps at the new size before the leave
    sent = time.monotonic()
    jobs.podman("kill", "--signal", "TERM", name)
    waited = subprocess.Popen(
        ["podman", "wait", "--interval", "10ms", name], env=jobs.env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_for(
        lambda: member not in jobs.world()[1], timeout_s=60, interval_s=0.005,
        what=f"the world without {member}",
    )  # fmt: skip
    world = time.monotonic() - sent
    out, _ = waited.communicate(timeout=120)
    gone = time.monotonic() - sent
    return world, gone, int(out.strip() or -1)


def describe(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--image", default="localhost/edl-trainer:0.1.0")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="edl-bench-leave-") as tmp:
        conf = Path(tmp) / "containers.conf"
        conf.write_text(containers_conf("runc"))
        work = Path(tmp) / "work"
        for folder in (work, work / "tmp"):
            folder.mkdir(parents=True)
            folder.chmod(0o777)  # the image's user (uid 65532) writes here
        jobs = Containers(args.image, work, {**os.environ, "CONTAINERS_CONF": str(conf)})
        worlds, exits, statuses = [], [], []
        try:
            first = jobs.start("a")
            wait_for(
                lambda: jobs.trains({"a"}), timeout_s=TRAIN_SECONDS, interval_s=0.1,
                what="a training alone", describe=lambda: jobs.logs(first),
            )  # fmt: skip
            for i in range(args.rounds):
                world, gone, status = one_leave(jobs, f"b{i}")
                worlds.append(world)
                exits.append(gone)
                statuses.append(status)
                print(f"round {i}: world {world:.2f} s, container exit {gone:.2f} s "
                      f"(status {status})", flush=True)  # fmt: skip
        finally:
            jobs.remove_all()
        print(f"\n{args.image}, {args.rounds} rounds, min / median / max in seconds")
        print(f"SIGTERM -> world without the leaver written   {describe(worlds)}")
        print(f"SIGTERM -> container exited (podman wait)     {describe(exits)}")
        print(f"exit statuses                                 {sorted(set(statuses))}")
        print(f"load average at the end                       {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
