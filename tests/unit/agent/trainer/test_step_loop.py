"""The step loop (`StepLoop`): what happens around the script's work on each step.

A world of one rank and a dict for a model: each step is logged before the script sees it,
committed (sampler and global step) only once the script comes back for the next one, and
recorded; an agreed stop ends the world at that boundary, after the commit; a step gate
holds the loop, still answering a stop; `epoch=` ends with its epoch.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from agent.trainer.handoff import StateHandoff
from agent.trainer.ledger import SampleLedger
from agent.trainer.recording import StepRecorder
from agent.trainer.sampler import ElasticSampler
from agent.trainer.settings import ElasticTrainerSettings
from agent.trainer.step_gate import StepGate
from agent.trainer.step_loop import StepLoop
from tests.unit.agent.trainer.helpers import DictCollective, Ranks
from tests.unit.agent.trainer.test_handoff import Link


def loop_of(
    tmp_path: Path, samples: int = 10, batch: int = 4, epochs: int = 2
) -> tuple[StepLoop, Ranks, list[int]]:
    """A loop over `samples` in global batches of `batch`; the list records its rescales."""
    world = Ranks()
    handoff = StateHandoff(Link(), DictCollective(), ElasticTrainerSettings())  # type: ignore[arg-type]
    handoff.attach({"w": 0}, None)
    handoff.attach_sampler(ElasticSampler(samples, batch, epochs, seed=1))
    handoff.restore()
    rescales: list[int] = []

    def rescale() -> None:  # as a real one: in the next world, no drain is pending
        rescales.append(handoff.global_step)
        world.drain = False

    loop = StepLoop(world, handoff, StepRecorder(), rescale)
    loop.enter_world(SampleLedger(tmp_path / "ledger", "m", 1, 0))
    return loop, world, rescales


def intents(tmp_path: Path) -> list[dict[str, Any]]:
    lines = "".join(p.read_text() for p in sorted((tmp_path / "ledger").glob("*.jsonl")))
    return [json.loads(line) for line in lines.splitlines() if '"s"' in line]


def test_each_step_is_logged_before_the_script_sees_it_and_committed_after(
    tmp_path: Path,
) -> None:
    loop, world, _ = loop_of(tmp_path)
    handoff = loop.handoff
    seen: list[tuple[int, int, int]] = []
    for plan in loop.steps():
        logged = intents(tmp_path)
        assert logged[-1]["s"] == handoff.global_step == len(seen)  # logged, not committed
        assert logged[-1]["ids"] == plan.indices.tolist()
        assert loop.share == 1.0 and loop.current is plan
        seen.append((plan.epoch, plan.start, plan.global_count))
    assert seen == [(0, 0, 4), (0, 4, 4), (0, 8, 2), (1, 0, 4), (1, 4, 4), (1, 8, 2)]
    assert handoff.global_step == 6 and handoff.sampler.done
    assert loop.recorder.snapshot().steps == 6 and loop.recorder.snapshot().samples == 20
    assert world.marks == ["first_step"]  # once per world


def test_an_epoch_ends_with_its_last_step_committed(tmp_path: Path) -> None:
    loop, _, _ = loop_of(tmp_path)
    starts = [plan.start for plan in loop.steps(epoch=0)]
    assert starts == [0, 4, 8]
    assert (loop.handoff.sampler.epoch, loop.handoff.sampler.consumed) == (1, 0)
    assert [plan.epoch for plan in loop.steps(epoch=0)] == []  # that epoch is over
    assert [plan.start for plan in loop.steps(epoch=1)] == [0, 4, 8]


def test_an_agreed_stop_ends_the_world_at_the_boundary_after_the_commit(tmp_path: Path) -> None:
    loop, world, rescales = loop_of(tmp_path)
    steps = loop.steps()
    next(steps)
    world.drain = True  # asked while the script trains step 0
    next(steps)  # the boundary: step 0 committed, then the rescale, then step 1
    assert rescales == [1]
    assert loop.handoff.global_step == 1


def test_step_end_hooks_run_before_the_step_is_recorded(tmp_path: Path) -> None:
    loop, _, _ = loop_of(tmp_path, epochs=1)
    recorded: list[int] = []
    loop.on_step_end(lambda: recorded.append(loop.recorder.snapshot().steps))
    for _ in loop.steps():
        pass
    assert recorded == [0, 1, 2]


def test_a_gate_holds_the_loop_and_a_stop_asked_meanwhile_is_a_rescale(tmp_path: Path) -> None:
    loop, world, rescales = loop_of(tmp_path, epochs=1)
    gate = StepGate(tmp_path / "gate", poll_seconds=0.01, max_wait_seconds=60)
    gate.allow(1)
    steps = loop.steps(gate)
    assert next(steps).start == 0  # step 0 is allowed; step 1 is not
    threading.Timer(0.05, setattr, args=(world, "drain", True)).start()  # a stop while held

    def rescale() -> None:  # into the next world (no drain pending there), and the gate opens
        rescales.append(loop.handoff.global_step)
        world.drain = False
        gate.allow_all()

    loop._rescale = rescale
    assert next(steps).start == 4  # the held boundary rescaled, then the gate opened
    assert rescales == [1]
    assert [plan.start for plan in steps] == [8]


def test_a_gate_that_never_opens_lets_the_loop_go_after_its_bound(tmp_path: Path) -> None:
    loop, _, rescales = loop_of(tmp_path, epochs=1)
    gate = StepGate(tmp_path / "gate", poll_seconds=0.01, max_wait_seconds=0.05)
    assert len(list(loop.steps(gate))) == 3  # held (a missing file allows none), then opened
    assert rescales == []


def test_a_new_world_reports_its_first_step_again(tmp_path: Path) -> None:
    loop, world, _ = loop_of(tmp_path, epochs=1)
    steps = loop.steps()
    next(steps)
    next(steps)
    loop.enter_world(None)  # as an in-process rescale does
    next(steps)
    assert world.marks == ["first_step", "first_step"]
