"""`--version` on every CLI and the build-info series on each `/metrics`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import agent
import metrics_adapter
from agent.process.app import create_registry
from agent.process.cli import main as agent_main
from edl_sim.hpa.cli import main as hpa_main
from metrics_adapter.cli import main as adapter_main
from metrics_adapter.selfmetrics import AdapterMetrics
from tests.unit.agent.helpers import StubTrainer


@pytest.mark.parametrize(
    ("prog", "main"),
    [("edl-agent", agent_main), ("edl-adapter", adapter_main), ("edl-hpa", hpa_main)],
)
def test_version_prints_one_line_and_exits_0(
    prog: str, main: Callable[[list[str]], int], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"{prog} {agent.__version__}\n"
    assert agent.__version__ == metrics_adapter.__version__ != "0+unknown"


def test_agent_metrics_carry_build_info(tmp_path: Path) -> None:
    text = generate_latest(create_registry(tmp_path, StubTrainer(), None)).decode()
    assert f'version="{agent.__version__}"' in _line(text, "edl_agent_build_info")


def test_adapter_metrics_carry_build_info(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDL_BUILD_REVISION", "abc123")
    registry = CollectorRegistry()
    AdapterMetrics(registry)
    line = _line(generate_latest(registry).decode(), "edl_adapter_build_info")
    assert f'version="{metrics_adapter.__version__}"' in line and 'revision="abc123"' in line
    assert line.endswith(" 1.0")


def _line(text: str, name: str) -> str:
    (line,) = [x for x in text.splitlines() if x.startswith(name + "{")]
    return line
