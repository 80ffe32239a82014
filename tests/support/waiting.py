"""Bounded polling: every wait in the e2e layer is capped in time and in attempts."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A condition did not hold in time; the message says what was last seen."""


def wait_for(
    probe: Callable[[], T | None],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = 0.5,
    describe: Callable[[], str] | None = None,
    abort_on: tuple[type[BaseException], ...] = (),
) -> T:
    """Calls `probe` until it returns a truthy value, which is returned.

    Exceptions from `probe` count as "not yet" and are reported if the wait times out, except
    those of the `abort_on` types, which end the wait at once.

    Raises:
        WaitTimeout: `timeout_s` passed (or 10 000 attempts); the message holds the last value
            or error and `describe()`'s output.
    """
    deadline = time.monotonic() + timeout_s
    last: object = None
    for _ in range(10_000):
        try:
            value = probe()
            if value:
                return value
            last = value
        except abort_on:
            raise
        except Exception as e:
            last = e
        if time.monotonic() >= deadline:
            break
        time.sleep(interval_s)
    extra = ""
    if describe is not None:
        try:
            extra = "\n" + describe()
        except Exception as e:
            extra = f"\n(describe failed: {e!r})"
    raise WaitTimeout(
        f"timed out after {timeout_s:.0f} s waiting for {what}; last: {last!r}{extra}"
    )
