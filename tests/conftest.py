"""Marks each test by its layer (its folder), so `-m unit|integration|e2e` selects it, and loads
the hypothesis profile every layer runs under (CI included).

The profile has no timing health checks and no deadline: on a loaded 2-core machine a property
test's inputs may take seconds each, and a slow machine is not a failing property (CI once
failed on `too_slow`: 2 inputs in 62 s). Tests set `max_examples` and nothing else; a unit test
(tests/unit/architecture/test_hypothesis_profile.py) fails if one sets a deadline or replaces
the suppressed health checks.

A unit test not marked ``slow`` may not start a process or import torch or Paddle
(:func:`tests.support.fast_units.guarded` fails it, naming what it did), so
``pytest tests/unit -m "unit and not slow"`` stays fast.

Every test also gets the process environment back as it found it
(:func:`tests.support.environment.restored_environment`): an in-process trainer exports its
world into ``os.environ`` on purpose, and later tests must not see it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.support.environment import restored_environment
from tests.support.fast_units import guarded

_LAYERS = ("unit", "integration", "e2e")

HYPOTHESIS_PROFILE = "edl-load-tolerant"
"""The profile loaded for every test run; its settings say nothing about speed."""

settings.register_profile(
    HYPOTHESIS_PROFILE,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(HYPOTHESIS_PROFILE)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).parts
        for layer in _LAYERS:
            if layer in parts:
                item.add_marker(getattr(pytest.mark, layer))


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """What a test sets in ``os.environ`` ends with it."""
    with restored_environment():
        yield


@pytest.fixture(autouse=True)
def _fast_units_stay_fast(request: pytest.FixtureRequest) -> Iterator[None]:
    """A unit test not marked ``slow`` starts no process and imports no framework."""
    node = request.node
    if node.get_closest_marker("unit") is None or node.get_closest_marker("slow") is not None:
        yield
        return
    with guarded(node.nodeid):
        yield
