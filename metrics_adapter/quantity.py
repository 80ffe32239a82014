"""Kubernetes ``resource.Quantity`` strings: the grammar lives in `edl_common.quantity`."""

from __future__ import annotations

from edl_common.quantity import (
    QuantityError,
    format_milli,
    format_quantity,
    milli_value,
    parse_quantity,
)

__all__ = ["QuantityError", "format_milli", "format_quantity", "milli_value", "parse_quantity"]
