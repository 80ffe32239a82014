"""The simulated node's kubelet: one `edl-agent run --elastic` process per bound worker pod.

A worker pod bound to the node gets an agent (local membership store, in-process re-init
where Paddle allows it); a pod marked terminating gets SIGTERM once (the agent leaves at a
step boundary, as on Kubernetes); a pod whose agent exited is removed from the cluster (the
ReplicaSet then replaces it if the Deployment still wants it).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from examples.demo.cluster import SimulatedCluster
from examples.demo.probe import free_port
from examples.demo.processes import ProcessGroup

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class AgentSettings:
    """How every agent of the job is started."""

    store: Path
    """The local membership store (``--membership local:<store>``)."""
    ledger: Path
    """``EDL_SAMPLE_LEDGER``: every rank logs the sample ids it trains."""
    pod_dir: Path
    """Per pod: its control directory and log."""
    trainer: Sequence[str]
    """The training command after ``--``."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment (debounce, ...)."""


@dataclass
class RunningAgent:
    """An agent process for one pod."""

    pod: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    stopping: bool = False


class LocalKubelet:
    """Runs the agents of the job's bound pods and notices when they exit."""

    def __init__(
        self, procs: ProcessGroup, settings: AgentSettings, job: str, base_env: dict[str, str]
    ) -> None:
        self._procs = procs
        self._settings = settings
        self._job = job
        self._env = base_env
        self.agents: dict[str, RunningAgent] = {}
        self.exits: list[tuple[str, int]] = []
        """(pod, exit status) of every agent that ended, in order."""

    def sync(self, cluster: SimulatedCluster) -> None:
        """Starts, stops and forgets agents so that they match the cluster's worker pods."""
        for name, running in list(self.agents.items()):
            status = running.proc.poll()
            if status is not None:
                del self.agents[name]
                self.exits.append((name, status))
                cluster.remove(name)
        for pod in cluster.workers():
            agent = self.agents.get(pod.name)
            if agent is None and pod.node is not None and not pod.terminating:
                started = self._start(pod.name, cluster.job.max_workers)
                self.agents[pod.name] = started
                pod.address = f"127.0.0.1:{started.port}"
            elif agent is not None and pod.terminating and not agent.stopping:
                agent.proc.terminate()
                agent.stopping = True

    def _start(self, pod: str, max_world: int) -> RunningAgent:
        s = self._settings
        port = free_port()
        log = s.pod_dir / f"{pod}.log"
        env = {
            **self._env,
            "EDL_MEMBER_ID": pod,
            "EDL_ELASTIC_DIR": str(s.pod_dir / pod),
            "EDL_SAMPLE_LEDGER": str(s.ledger),
            **s.env,
        }
        argv = [
            sys.executable, "-m", "agent", "run", "--host", "127.0.0.1", "--port", str(port),
            "--elastic", "--job", self._job, "--membership", f"local:{s.store}",
            "--min", "1", "--max", str(max_world), "--on-finished", "exit",
            "--", *s.trainer,
        ]  # fmt: skip
        proc = self._procs.spawn(argv, log, env, REPO_ROOT)
        return RunningAgent(pod, proc, port, log)

    def stop_all(self, grace_s: float) -> None:
        """SIGTERM every agent (they leave at a step boundary), SIGKILL after ``grace_s``."""
        self._procs.terminate([a.proc for a in self.agents.values()], grace_s)
        self.agents.clear()
