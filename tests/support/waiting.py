"""Bounded polling, the one way every layer waits: capped in time and in attempts.

A test never sleeps to synchronise; it polls a condition with a deadline, and on a loaded
machine the deadline is generous. When the wait fails, the message says what was awaited, the
last value or error seen, and whatever `describe()` adds (process states, log tails).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A condition did not hold in time (or the wait gave up); the message says what was seen."""


def wait_for(
    probe: Callable[[], T | None],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = 0.5,
    describe: Callable[[], str] | None = None,
    abort_on: tuple[type[BaseException], ...] = (),
    give_up: Callable[[], object] | None = None,
) -> T:
    """Calls `probe` until it returns a truthy value, which is returned.

    Exceptions from `probe` count as "not yet" and are reported if the wait times out, except
    those of the `abort_on` types, which end the wait at once. `give_up` is asked after each
    miss: a truthy answer (e.g. "the process under test exited") fails the wait at once.

    Raises:
        WaitTimeout: `timeout_s` passed (at most one attempt per `interval_s`), or `give_up`
            answered; the message holds the last value or error and `describe()`'s output.
    """
    deadline = time.monotonic() + timeout_s
    last: object = None
    ended = f"timed out after {timeout_s:.0f} s"
    for _ in range(int(timeout_s / interval_s) + 2):
        try:
            value = probe()
            if value:
                return value
            last = value
        except abort_on:
            raise
        except Exception as e:
            last = e
        reason = give_up() if give_up is not None else None
        if reason:
            ended = f"gave up ({reason})"
            break
        if time.monotonic() >= deadline:
            break
        time.sleep(interval_s)
    extra = ""
    if describe is not None:
        try:
            extra = "\n" + describe()
        except Exception as e:
            extra = f"\n(describe failed: {e!r})"
    raise WaitTimeout(f"{ended} waiting for {what}; last: {last!r}{extra}")
