"""Tests that need a training framework, without importing it when they are collected.

Collecting ``pytest tests/unit -m "unit and not slow"`` must import neither torch nor Paddle
(seconds each, `tests.support.fast_units`): a module-level ``pytest.importorskip`` would. A test
that trains in a subprocess asks :func:`needs` (the installed package is looked up, not
imported); one that trains in-process imports the framework inside, through a fixture.
"""

from __future__ import annotations

import importlib.util

import pytest


def installed(name: str) -> bool:
    """True when the top-level package `name` can be imported (it is not imported here)."""
    return importlib.util.find_spec(name) is not None


def needs(name: str) -> pytest.MarkDecorator:
    """Skips a test when `name` is not installed."""
    return pytest.mark.skipif(not installed(name), reason=f"{name} is not installed")
