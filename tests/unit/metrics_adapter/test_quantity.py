from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edl_common.quantity import format_quantity, parse_quantity


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.85, "850m"),
        (0, "0"),
        (1, "1"),
        (1.5, "1500m"),
        (12000, "12k"),
        (3e6, "3M"),
        (0.0004, "400u"),
        (2.5e-7, "250n"),
        (1e-10, "0"),
        (-2.5, "-2500m"),
        (99.8859, "99886m"),
        (0.1 + 0.2, "300m"),
        (1e30, "9223372036854775807"),
    ],
)
def test_canonical_form(value: float, text: str) -> None:
    assert format_quantity(value) == text


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_values_have_no_quantity(value: float) -> None:
    with pytest.raises(ValueError, match="Quantity"):
        format_quantity(value)


@given(st.floats(min_value=-1e12, max_value=1e12, allow_nan=False))
def test_round_trip_within_milli(value: float) -> None:
    assert float(parse_quantity(format_quantity(value))) == pytest.approx(value, abs=1e-3, rel=1e-9)
