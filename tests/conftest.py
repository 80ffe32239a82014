"""Marks each test by its layer (its folder), so `-m unit|integration|e2e` selects it."""

from __future__ import annotations

from pathlib import Path

import pytest

_LAYERS = ("unit", "integration", "e2e")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).parts
        for layer in _LAYERS:
            if layer in parts:
                item.add_marker(getattr(pytest.mark, layer))
