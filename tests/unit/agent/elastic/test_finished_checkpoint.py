"""A finished job is never resumed, even when the world record is gone: the newest checkpoint
says it finished, and the agent records the finish again instead of starting a trainer."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agent.checkpoints.catalogue import Checkpoints, finished_at
from agent.checkpoints.local import LocalDirectory
from agent.elastic.local_store import LocalStore
from agent.elastic.membership import Membership, MembershipSettings
from agent.elastic.supervisor import ElasticSettings, ElasticSupervisor
from agent.elastic.world import Member, World
from agent.process.rescales import RescaleLog
from tests.unit.agent.elastic.helpers import FakeTrainer


def supervisor(tmp_path: Path, checkpoints: Checkpoints) -> tuple[ElasticSupervisor, FakeTrainer]:
    me = Member(joined=1.0, id="a", incarnation="x", host="127.0.0.1", ports=(7000, 7001))
    membership = Membership(
        LocalStore.create(tmp_path / "store"), me, MembershipSettings(poll_interval=0.02)
    )
    control = tmp_path / "control"
    control.mkdir()
    fake = FakeTrainer(control, exit_status=0)
    sup = ElasticSupervisor(
        membership,
        fake,
        control,
        RescaleLog(),
        ElasticSettings(backend="gloo", init_timeout=10, on_finished="exit"),
        job="digits",
        finished_elsewhere=lambda: finished_at(checkpoints),
    )
    return sup, fake


def test_a_finished_checkpoint_without_a_world_record_starts_no_trainer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    checkpoints = Checkpoints(LocalDirectory(tmp_path / "ckpt"))
    checkpoints.write(b"state", step=120, generation=7, epoch=5, consumed=0, framework="paddle")
    checkpoints.write(
        b"state", step=184, generation=7, epoch=5, consumed=0, framework="paddle", finished=True
    )
    sup, fake = supervisor(tmp_path, checkpoints)
    with caplog.at_level(logging.INFO, logger="agent.elastic"):
        assert sup.run(max_seconds=20) == 0
    assert fake.worlds == []  # never started, not even warm
    assert sup.job_finished and sup.finished_at_step == 184
    assert "the newest checkpoint says job digits finished at step 184" in caplog.text
    assert "could not mark" not in caplog.text
    world = World.from_json((tmp_path / "store" / "world.json").read_text())
    assert world.finished and world.finished_at_step == 184 and world.paused


@pytest.mark.slow
def test_an_unfinished_checkpoint_lets_the_job_run(tmp_path: Path) -> None:
    checkpoints = Checkpoints(LocalDirectory(tmp_path / "ckpt"))
    checkpoints.write(b"state", step=120, generation=7, epoch=5, consumed=0, framework="paddle")
    sup, fake = supervisor(tmp_path, checkpoints)
    assert sup.run(max_seconds=20) == 0
    assert [w.generation for w in fake.worlds] == [0, 1]  # warm, then trained to the end
