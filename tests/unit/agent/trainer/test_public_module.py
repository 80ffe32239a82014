"""`agent.trainer`, the one module a training script imports: its names, and nothing heavy."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import agent.trainer

ROOT = Path(__file__).resolve().parents[4]


def test_every_public_name_is_the_object_its_module_defines() -> None:
    for name, module in agent.trainer.EXPORTS.items():
        assert getattr(agent.trainer, name) is getattr(importlib.import_module(module), name)
    assert sorted(agent.trainer.__all__) == sorted(agent.trainer.EXPORTS)
    assert set(agent.trainer.__all__) <= set(dir(agent.trainer))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'ElasticDataLoaderz'"):
        _ = agent.trainer.ElasticDataLoaderz


@pytest.mark.slow
def test_importing_the_package_loads_no_framework_and_no_numpy() -> None:
    """The agent process imports `agent.trainer.frameworks` (descriptors) through it."""
    code = (
        "import sys, agent.trainer, agent.trainer.frameworks; "
        "print(sorted(m for m in ('torch', 'paddle', 'numpy') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip() == "[]", done.stderr
