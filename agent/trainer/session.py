"""The training API: what a training script imports to be measured by the agent.

Usage (see docs/agent.md)::

    from agent.trainer.session import start_session

    session = start_session()           # reads the env the agent set; cheap without an agent
    rec = session.recorder
    for batch in loader:
        rec.begin_step()
        loss = model(batch).mean(); loss.backward()
        allreduce()                     # a framework's gradients.GradientAllReduce, timed
        opt.step(); opt.clear_grad()
        rec.end_step(samples=len(batch))
    session.close()

Under `edl-agent run` the session writes its counters to `$EDL_METRICS_DIR` on a background
thread and holds a lease on the agent (`agent.trainer.lease`: the trainer stops when the agent
dies); run bare (no `EDL_METRICS_DIR`), it records in memory only, so the same script works
with and without the agent.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Mapping
from types import TracebackType

from agent.protocol.trainer_world import TrainerWorld
from agent.trainer import frameworks
from agent.trainer.flushing import ReportFlusher
from agent.trainer.frameworks.base import Framework
from agent.trainer.lease import AgentLease, watch_agent
from agent.trainer.recording import StepRecorder
from agent.trainer.reports import report_path
from agent.trainer.settings import TrainerSettings


class TrainingSession:
    """A trainer incarnation's world and recorder, plus the flusher that reports them."""

    def __init__(
        self,
        world: TrainerWorld,
        recorder: StepRecorder,
        flusher: ReportFlusher | None,
        lease: AgentLease | None = None,
    ):
        self.world = world
        """The collective world this trainer was started in."""
        self.recorder = recorder
        """Record steps and communication here (bind it to a local in the training loop)."""
        self._flusher = flusher
        self.lease = lease
        """The lease on the agent (None when run bare): the trainer stops when the agent dies."""

    @property
    def rank(self) -> int:
        """This trainer's rank."""
        return self.world.rank

    @property
    def world_size(self) -> int:
        """Number of ranks training together."""
        return self.world.world_size

    @property
    def generation(self) -> int:
        """Generation of the current world (grows at every world change)."""
        return self.world.generation

    def flush(self) -> None:
        """Writes the report now (e.g. before a planned exit); no-op without an agent."""
        if self._flusher is not None:
            self._flusher.flush()

    def close(self) -> None:
        """Stops flushing after a final report; idempotent."""
        if self._flusher is not None:
            self._flusher.close()
            self._flusher = None

    def __enter__(self) -> TrainingSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def start_session(
    env: Mapping[str, str] | None = None,
    recorder: StepRecorder | None = None,
    framework: Framework | None = None,
) -> TrainingSession:
    """Builds the session from the environment and starts reporting if an agent is present.

    The world is read through `framework` when given, else through whichever registered
    framework's variables are set (each framework names its own).

    Raises:
        ConfigError: a framework's or an EDL_* variable is malformed.
        MetricsDirError: `EDL_METRICS_DIR` is set but cannot be written.
    """
    env = os.environ if env is None else env
    world = frameworks.world_from_env(env, framework)
    settings = TrainerSettings.from_env(env)
    recorder = recorder or StepRecorder()
    flusher = None
    if settings.metrics_dir is not None:
        incarnation = settings.incarnation or os.getpid()
        flusher = ReportFlusher(
            recorder,
            report_path(settings.metrics_dir, incarnation),
            world,
            incarnation,
            settings.flush_seconds,
        )
        flusher.start()
    session = TrainingSession(world, recorder, flusher, watch_agent(env))
    atexit.register(session.close)
    return session
