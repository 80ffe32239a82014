"""Marks each test by its layer (its folder), so `-m unit|integration|e2e` selects it, and loads
the hypothesis profile every layer runs under (CI included).

The profile has no timing health checks and no deadline: on a loaded 2-core machine a property
test's inputs may take seconds each, and a slow machine is not a failing property (CI once
failed on `too_slow`: 2 inputs in 62 s). Tests set `max_examples` and nothing else; a unit test
(tests/unit/architecture/test_hypothesis_profile.py) fails if one sets a deadline or replaces
the suppressed health checks.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

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
