"""Authentication on the event loop must not wait on the network: it raises instead.

The front end (:mod:`metrics_adapter.http.server`) runs the request filters
(:mod:`metrics_adapter.api.filters`) on its event loop, where a request costs no thread
hand-off. Code about to wait on the network (a TokenReview or SubjectAccessReview that is not
cached) calls :func:`may_block` first; on the loop that raises :class:`WouldBlock` and the
front end runs the filters again on a thread. Nothing before :func:`may_block` may have side
effects, so a request filtered twice is answered exactly as if it had gone to a thread at
once; the rule is a test, not a promise: tests/unit/metrics_adapter/test_deferral_side_effects.py
runs the same requests loop-first and threads-only and fails when answers, self-metrics,
reviews or caches differ.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

_on_loop: contextvars.ContextVar[bool] = contextvars.ContextVar("edl_on_loop", default=False)


class WouldBlock(Exception):
    """Raised by :func:`may_block` on the event loop: run this request's filters on a thread."""


def may_block() -> None:
    """Call before waiting on the network.

    Raises:
        WouldBlock: the caller runs on the event loop.
    """
    if _on_loop.get():
        raise WouldBlock()


@contextlib.contextmanager
def on_loop() -> Iterator[None]:
    """Mark the code inside as running on the event loop (it must not block)."""
    token = _on_loop.set(True)
    try:
        yield
    finally:
        _on_loop.reset(token)
