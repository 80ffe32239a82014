"""Supervision series: world gauges follow the supervisor, rescales are exported from zero."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.process.app import create_registry
from agent.process.rescales import RescaleLog
from agent.process.settings import AgentSettings
from agent.process.trainer_supervisor import TrainerSupervisor
from agent.protocol.trainer_world import TrainerWorld
from tests.unit.agent.helpers import scrape


def test_world_gauges_follow_an_in_process_world_change(tmp_path: Path) -> None:
    sup = TrainerSupervisor(["true"], tmp_path, TrainerWorld(rank=0, world_size=2), {})
    rescales = RescaleLog()
    registry = create_registry(tmp_path, sup, None, rescales)
    before = scrape(registry)
    assert (before["edl_trainer_world_size"], before["edl_trainer_generation"]) == (2, 0)
    assert before["edl_trainer_rescales_total"] == 0
    assert before['edl_trainer_rescale_phase_seconds_total{phase="rendezvous"}'] == 0
    assert before["edl_trainer_up"] == 0 and before["edl_trainer_restarts_total"] == 0

    sup.update_world(TrainerWorld(rank=2, world_size=3, generation=1))
    rescales.record(1.5, {"detect": 0.1, "drain": 0.2, "rendezvous": 0.4, "init": 0.5})
    after = scrape(registry)
    assert (after["edl_trainer_world_size"], after["edl_trainer_rank"]) == (3, 2)
    assert after["edl_trainer_generation"] == 1
    assert after["edl_trainer_rescales_total"] == 1
    assert after['edl_trainer_rescale_pause_seconds_bucket{le="1.0"}'] == 0
    assert after['edl_trainer_rescale_pause_seconds_bucket{le="2.5"}'] == 1
    assert after["edl_trainer_rescale_pause_seconds_sum"] == pytest.approx(1.5)
    assert after['edl_trainer_rescale_phase_seconds_total{phase="init"}'] == pytest.approx(0.5)
    assert after['edl_trainer_rescale_phase_seconds_total{phase="restore"}'] == 0


def test_unknown_rescale_phases_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown rescale phases"):
        RescaleLog().record(1.0, {"coffee": 1.0})


def test_settings_from_the_environment_are_checked() -> None:
    assert (
        AgentSettings.from_env({"EDL_AGENT_LINGER_SECONDS": "2.5"}).exporter.linger_seconds == 2.5
    )
    with pytest.raises(ConfigError, match="EDL_AGENT_LOG_LEVEL='chatty': expected one of DEBUG"):
        AgentSettings.from_env({"EDL_AGENT_LOG_LEVEL": "chatty"})
    with pytest.raises(ConfigError, match="EDL_AGENT_FLUSH_SECONDS='often'"):
        AgentSettings.from_env({"EDL_AGENT_FLUSH_SECONDS": "often"})
    with pytest.raises(ConfigError, match="must be > 0"):
        AgentSettings.from_env({"EDL_AGENT_FLUSH_SECONDS": "0"})
