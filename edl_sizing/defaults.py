"""The sizing loop's timing defaults, written once.

The adapter's ``--sizing-*`` flags and the simulator's policy settings both take them from here
(the decision's own knobs are :class:`edl_sizing.decision.SizingPolicy`'s field defaults).
"""

from __future__ import annotations

ROUND_INTERVAL_S = 10.0
"""Seconds between sizing rounds (``--sizing-interval``)."""
HISTORY_INTERVAL_S = 30.0
"""Seconds between folds of new observations into the shared history
(``--sizing-history-interval``)."""
THROUGHPUT_WINDOW_S = 30.0
"""A throughput is an observation only over a world unchanged for this long: the default
metric catalogue's longest window (a unit test holds the two equal)."""
DEFAULT_MAX_WORKERS = 16
"""A job's maximum without the max-workers annotation (``--sizing-default-max-workers``)."""
