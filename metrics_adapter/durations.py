"""Durations such as ``500ms``, ``5s``, ``1m30s``: the grammar lives in `edl_common.durations`."""

from __future__ import annotations

from edl_common.durations import format_duration, parse_duration

__all__ = ["format_duration", "parse_duration"]
