from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.elastic.failures import FailurePolicy, TrainerFailure
from agent.elastic.finished_job import RetirementFailed
from agent.elastic.local_store import LocalStore
from agent.elastic.membership import Membership, MembershipSettings
from agent.elastic.supervisor import (
    ElasticSettings,
    ElasticSupervisor,
    start_warm,
    trainer_world,
)
from agent.elastic.world import Member, World
from agent.process.rescales import RescaleLog
from agent.protocol.control import ControlChannel, NextWorld, Timings
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer import frameworks
from tests.unit.agent.elastic.helpers import FakeTrainer


def agent(
    tmp_path: Path,
    exit_status: int,
    on_finished: str = "exit",
    reports: str = "paddle",
    on_job_finished: Callable[[int | None], object] | None = None,
    warm_started: bool = False,
    poll_interval: float = 0.02,
    fake_type: type[FakeTrainer] = FakeTrainer,
    failures: FailurePolicy | None = None,
    on_job_failed: Callable[[tuple[TrainerFailure, ...]], object] | None = None,
) -> tuple[ElasticSupervisor, FakeTrainer, Path]:
    store = LocalStore.create(tmp_path / "store")
    me = Member(joined=1.0, id="a", incarnation="x", host="127.0.0.1", ports=(7000, 7001))
    settings = MembershipSettings(debounce=0.1, poll_interval=poll_interval)
    membership = Membership(store, me, settings)
    control = tmp_path / "control"
    fake = fake_type(control, exit_status, reports)
    if warm_started:  # as run_elastic does, before the supervisor exists
        start_warm(fake, control, "gloo")
    else:
        control.mkdir()
    sup = ElasticSupervisor(
        membership,
        fake,
        control,
        RescaleLog(),
        ElasticSettings(
            backend="gloo",
            init_timeout=10,
            on_finished=on_finished,
            failures=failures or FailurePolicy(),
        ),
        job="digits",
        on_job_finished=on_job_finished,
        warm_started=warm_started,
        on_job_failed=on_job_failed,
    )
    return sup, fake, tmp_path / "store" / "members" / "a.json"


@pytest.mark.slow
def test_warm_trainer_gets_the_world_and_the_job_ends_with_its_status(tmp_path: Path) -> None:
    sup, fake, heartbeat = agent(tmp_path, exit_status=0)
    assert sup.run(max_seconds=20) == 0
    assert fake.worlds[0].generation == 0  # started warm, before joining
    handed = ControlChannel(tmp_path / "control").next_world()
    assert handed is not None and handed.generation == 1 and handed.world is not None
    assert handed.world.world_size == 1
    assert handed.world.backend == "gloo"
    assert fake.worlds[-1].world_size == 1 and fake.worlds[-1].generation == 1
    assert not heartbeat.exists()  # left the job once it was done
    world = World.from_json((tmp_path / "store" / "world.json").read_text())
    assert world.finished and world.finished_at_step == 184 and world.generation == 1
    assert sup.job_finished and sup.finished_at_step == 184


def stop_after(sup: ElasticSupervisor, seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, sup.request_stop, args=(signal.SIGTERM,))
    timer.start()
    return timer


@pytest.mark.slow
def test_by_default_a_finished_member_idles_until_sigterm(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sup, fake, heartbeat = agent(tmp_path, exit_status=0, on_finished="idle")
    stop_after(sup, 2.0)
    t0 = time.monotonic()
    with caplog.at_level(logging.INFO, logger="agent.elastic.supervisor"):
        assert sup.run(max_seconds=300) == 0
    assert time.monotonic() - t0 > 1.9  # stayed up until the signal...
    assert "signal SIGTERM: exiting (the job was finished)" in caplog.text  # ...and left on it
    assert len(fake.worlds) == 2 and not fake.running  # no second trainer
    assert not heartbeat.exists() and sup.job_finished
    assert "job digits finished at step 184; idling" in caplog.text
    assert World.from_json((tmp_path / "store" / "world.json").read_text()).finished


@pytest.mark.slow
def test_scale_to_zero_hands_the_agreed_step_to_its_hook_once_and_idles_on_its_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int | None] = []

    def retire(step: int | None) -> None:
        calls.append(step)
        raise RetirementFailed("cannot scale Deployment d of finished job digits to 0: 403")

    sup, _, _ = agent(tmp_path, 0, on_finished="scale-to-zero", on_job_finished=retire)
    stop_after(sup, 1.5)
    with caplog.at_level(logging.INFO, logger="agent.elastic.supervisor"):
        assert sup.run(max_seconds=20) == 0  # idled until SIGTERM despite the failure
    assert calls == [184] and sup.job_finished
    assert "cannot scale Deployment d of finished job digits to 0: 403" in caplog.text


def finished_store(tmp_path: Path) -> None:
    other = Member(joined=0.5, id="z", incarnation="q", host="127.0.0.1", ports=(7100, 7101))
    store = LocalStore.create(tmp_path / "store")
    assert store.write_world(World(4, (other,)).finish(184).to_json(), "")


@pytest.mark.parametrize("on_finished", ["idle", "exit"])
def test_an_agent_reading_a_finished_world_starts_no_trainer(
    tmp_path: Path, on_finished: str, caplog: pytest.LogCaptureFixture
) -> None:
    finished_store(tmp_path)
    sup, fake, heartbeat = agent(tmp_path, exit_status=0, on_finished=on_finished)
    if on_finished == "idle":
        stop_after(sup, 1.0)
    with caplog.at_level(logging.INFO, logger="agent.elastic.supervisor"):
        assert sup.run(max_seconds=300) == 0
    assert "time limit reached" not in caplog.text  # idle: left on the signal; exit: at once
    assert fake.worlds == [] and not heartbeat.exists()  # never started, never joined
    assert sup.job_finished and sup.finished_at_step == 184
    verb = "idling" if on_finished == "idle" else "exiting"
    assert f"job digits already finished at step 184; {verb}" in caplog.text
    world = World.from_json((tmp_path / "store" / "world.json").read_text())
    assert world.generation == 4 and world.finished


@pytest.mark.slow
def test_a_standby_that_reads_a_finished_world_stops_its_trainer(tmp_path: Path) -> None:
    sup, fake, heartbeat = agent(tmp_path, exit_status=0)
    fake.exit_at = None
    # the job finishes while our trainer warms up: peek saw nothing, the first tick sees it
    real_start = fake.start

    def start_then_finish(world: TrainerWorld) -> int:
        pid = real_start(world)
        finished_store(tmp_path)
        return pid

    fake.start = start_then_finish  # type: ignore[method-assign]
    assert sup.run(max_seconds=20) == 0
    assert [w.generation for w in fake.worlds] == [0]  # only the warm stand-by
    assert ControlChannel(tmp_path / "control").next_world() == NextWorld(1, None)  # leave
    assert not fake.running
    assert sup.job_finished and not heartbeat.exists()


@pytest.mark.slow
def test_a_trainer_started_warm_before_the_supervisor_is_not_started_again(
    tmp_path: Path,
) -> None:
    sup, fake, heartbeat = agent(tmp_path, exit_status=0, warm_started=True)
    assert [w.generation for w in fake.worlds] == [0]  # started before the supervisor ran
    assert sup.run(max_seconds=20) == 0
    assert [w.generation for w in fake.worlds] == [0, 1]  # the stand-by, then its world
    assert sup.job_finished and not heartbeat.exists()


@pytest.mark.slow
def test_a_job_found_finished_sends_the_trainer_started_warm_away(tmp_path: Path) -> None:
    finished_store(tmp_path)
    sup, fake, heartbeat = agent(tmp_path, exit_status=0, warm_started=True)
    assert sup.run(max_seconds=20) == 0
    assert [w.generation for w in fake.worlds] == [0]  # no trainer in a world
    assert ControlChannel(tmp_path / "control").next_world() == NextWorld(1, None)  # leave
    assert not fake.running and not heartbeat.exists()  # gone, and never joined
    assert sup.job_finished and sup.finished_at_step == 184


class _SlowToImport(FakeTrainer):
    """Reports ready (its generation-0 timings) 0.1 s after its start, as a real import does."""

    def start(self, world: TrainerWorld) -> int:
        self.worlds.append(world)
        self.running, self.generation = True, world.generation
        ready = threading.Timer(0.1, self._mark, args=(Timings(imported=time.time()),))
        ready.start()
        return 4242


@pytest.mark.slow
def test_the_warm_trainer_is_joined_on_as_soon_as_it_reports_and_a_sigterm_heard_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A poll longer than the run's time limit: if only the poll ended a wait below, the run
    # would end at its limit ("time limit reached"), whatever the machine's speed. The agent
    # joins on the trainer's first report, then leaves on the SIGTERM sent once it joined.
    sup, fake, heartbeat = agent(
        tmp_path, exit_status=75, poll_interval=3600, fake_type=_SlowToImport
    )

    def sigterm_once_joined() -> None:
        for _ in range(3000):
            if heartbeat.exists():
                sup.request_stop(signal.SIGTERM)
                return
            time.sleep(0.01)

    threading.Thread(target=sigterm_once_joined, daemon=True).start()
    with caplog.at_level(logging.INFO, logger="agent.elastic.supervisor"):
        assert sup.run(max_seconds=300) == 0
    assert "time limit reached" not in caplog.text
    assert ControlChannel(tmp_path / "control").next_world() == NextWorld(1, None)  # leave
    assert not heartbeat.exists() and [w.generation for w in fake.worlds] == [0]


@pytest.mark.slow
def test_a_crashed_trainer_is_a_scale_down(tmp_path: Path) -> None:
    sup, _, heartbeat = agent(tmp_path, exit_status=128 + signal.SIGKILL)
    assert sup.run(max_seconds=20) == 137
    assert not heartbeat.exists()


@pytest.mark.slow
def test_sigterm_leaves_cleanly(tmp_path: Path) -> None:
    sup, fake, heartbeat = agent(tmp_path, exit_status=75)
    fake.exit_at = None
    sup.request_stop(signal.SIGTERM)
    assert sup.run(max_seconds=20) == 0
    handed = ControlChannel(tmp_path / "control").next_world()
    assert handed is not None and handed.world is None  # told to leave
    assert not heartbeat.exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(frameworks.FRAMEWORKS))
def test_later_trainers_start_in_the_framework_the_warm_trainer_reported(
    tmp_path: Path, name: str
) -> None:
    sup, fake, _ = agent(tmp_path, exit_status=0, reports=name)
    assert sup.run(max_seconds=20) == 0
    assert fake.framework.name == name


def test_trainer_world_maps_ranks_and_endpoints() -> None:
    a = Member(1.0, "a", "x", "10.0.0.1", (36543, 36544))
    b = Member(2.0, "b", "y", "10.0.0.2", (36543, 36544))
    tw = trainer_world(World(3, (a, b)), b.key, "gloo")
    assert (tw.rank, tw.world_size, tw.generation) == (1, 2, 3)
    assert tw.master == "10.0.0.1:36544" and tw.current_endpoint == "10.0.0.2:36544"
    with pytest.raises(ValueError):
        trainer_world(World(3, (a,)), b.key, "gloo")


@pytest.mark.slow
def test_a_crash_within_the_budget_is_recorded_with_its_tail_and_ends_the_agent(
    tmp_path: Path,
) -> None:
    sup, _, _ = agent(tmp_path, exit_status=3, failures=FailurePolicy(budget=1, window=60))
    assert sup.run(max_seconds=20) == 3  # the container restarts as a new member
    world = World.from_json((tmp_path / "store" / "world.json").read_text())
    assert not world.finished and len(world.failures) == 1
    failure = world.failures[0]
    assert (failure.member, failure.status) == ("a", 3)
    assert failure.tail[-1] == "RuntimeError: fake trainer crash"  # the trainer's stderr
    assert not sup.job_finished


@pytest.mark.slow
@pytest.mark.parametrize("on_finished", ["scale-to-zero", "exit"])
def test_the_crash_over_the_budget_fails_the_job_and_hands_the_failures_to_its_hook(
    tmp_path: Path, on_finished: str
) -> None:
    earlier = TrainerFailure("z", 137, time.time() - 5, ("Killed",))
    store = LocalStore.create(tmp_path / "store")
    assert store.write_world(World(0).with_failures((earlier,), failed=False).to_json(), "")
    failed: list[tuple[TrainerFailure, ...]] = []
    finished: list[int | None] = []
    sup, fake, _ = agent(
        tmp_path,
        exit_status=1,
        on_finished=on_finished,
        failures=FailurePolicy(budget=1, window=60),
        on_job_failed=failed.append,
        on_job_finished=finished.append,
    )
    if on_finished == "scale-to-zero":
        stop_after(sup, 2.0)
    status = sup.run(max_seconds=20)
    assert status == (1 if on_finished == "exit" else 0)  # exit: a failed Job; idle: SIGTERM
    assert sup.job_finished and sup.job_failed and not finished
    world = World.from_json((tmp_path / "store" / "world.json").read_text())
    assert world.failed and [f.status for f in world.failures] == [137, 1]
    if on_finished == "scale-to-zero":
        assert failed == [world.failures]
    assert len(fake.worlds) == 2  # no trainer after the failure: warm + the one that crashed
