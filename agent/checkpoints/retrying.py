"""A store call tried again after a store error: the rule both remote stores share.

An object store's answer can fail once and succeed a moment later: a connection a NAT dropped,
a handshake that timed out on a loaded node, or an S3-compatible server's own race (versitygw
answers ``ExistingObjectIsDirectory`` to one of two PUTs that create the same prefix at the
same instant). A missing object is an answer, not a failure: `CheckpointMissing` is never
tried again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TypeVar

from agent.checkpoints.errors import CheckpointMissing, CheckpointStoreError

T = TypeVar("T")

ATTEMPTS = 3
"""Tries per call: enough for a dropped connection or a transient refusal, few enough that an
unusable store is reported within seconds."""
BACKOFF_SECONDS = 0.5
"""The wait before the second try; doubled before each later one."""


def retried(
    call: Callable[[], T],
    errors: Callable[[], AbstractContextManager[object]],
    *,
    attempts: int,
    sleep: Callable[[float], None],
    log: logging.Logger,
) -> T:
    """`call` under `errors()`, up to `attempts` times; the last try's error is raised.

    `errors()` turns the backend's errors into `CheckpointStoreError`.
    """
    wait = BACKOFF_SECONDS
    for attempt in range(1, attempts + 1):
        try:
            with errors():
                return call()
        except CheckpointMissing:
            raise
        except CheckpointStoreError as e:
            if attempt == attempts:
                raise
            log.warning("%s (try %d of %d; again in %.1f s)", e, attempt, attempts, wait)
        sleep(wait)
        wait *= 2
    raise AssertionError("unreachable: the last attempt returns or raises")
