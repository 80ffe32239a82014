"""Property tests do not depend on the machine's speed: the profile every layer loads
(tests/conftest.py) has no deadline and no timing health checks, and no test sets them back."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import DeadlineExceeded, FailedHealthCheck

from tests.conftest import HYPOTHESIS_PROFILE

pytestmark = pytest.mark.unit

TESTS = Path(__file__).resolve().parents[2]


def _slow_property(s: settings) -> None:
    """A property whose inputs take 0.15 s each to generate and 0.25 s each to check (past
    hypothesis' default 200 ms deadline): what a property test meets on a loaded machine.
    The sleeps *are* the slowness under test."""

    def slow(x: int) -> int:
        time.sleep(0.15)
        return x

    @s
    @given(st.integers().map(slow))
    def prop(x: int) -> None:
        time.sleep(0.25)
        assert isinstance(x, int)

    prop()


def test_the_loaded_profile_is_the_load_tolerant_one() -> None:
    assert settings.get_profile(HYPOTHESIS_PROFILE) == settings.default
    assert settings.default.deadline is None
    assert {HealthCheck.too_slow, HealthCheck.data_too_large} <= set(
        settings.default.suppress_health_check
    )


@pytest.mark.slow
def test_a_slow_property_passes_under_the_profile_and_fails_without_it() -> None:
    _slow_property(settings(max_examples=5, database=None))  # inherits the loaded profile
    with pytest.raises((FailedHealthCheck, DeadlineExceeded)):
        _slow_property(settings(settings.get_profile("default"), max_examples=5, database=None))


_OVERRIDE = re.compile(r"\bsettings\(.*\b(deadline|suppress_health_check)=")


def test_no_test_sets_a_deadline_or_replaces_the_suppressed_health_checks() -> None:
    offenders = [
        f"{path.relative_to(TESTS.parent)}:{n}: {line.strip()}"
        for path in sorted(TESTS.rglob("*.py"))
        if path.name != "conftest.py" and path != Path(__file__).resolve()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if _OVERRIDE.search(line)
    ]
    assert offenders == [], "set these in tests/conftest.py's profile, not per test"
