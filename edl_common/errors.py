"""`ConfigError`: the one exception every EDL command turns into `error: ...` and exit status 2."""

from __future__ import annotations


class ConfigError(Exception):
    """A setting (flag, environment variable, configuration file) is invalid.

    The message is one line that names the setting the user wrote and says what is wrong,
    e.g. ``EDL_DRAIN_TIMEOUT='soon': not a duration (e.g. 300ms, 5s, 1m30s)``.
    """
