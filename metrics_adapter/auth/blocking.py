"""Requests answered on the event loop must not wait on the network: they defer instead.

The front end (:mod:`metrics_adapter.http.server`) runs an app that declares itself able to defer
(``INLINE_EXTENSION`` in a Flask app's ``extensions``) on its event loop, where a request
costs no thread hand-off. Code about to wait on the network (a TokenReview or
SubjectAccessReview that is not cached) calls :func:`may_block` first; on the loop that
raises :class:`WouldBlock`, the app marks the request (``DEFERRED_ENVIRON_KEY``) and the
front end runs it again on an app thread. Nothing on the way there may have side effects, so
a deferred request is answered exactly as if it had gone to a thread at once; the rule is a
test, not a promise: tests/unit/metrics_adapter/test_deferral_side_effects.py runs the same
requests loop-first and threads-only and fails when answers, self-metrics, reviews or caches
differ.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

INLINE_EXTENSION = "edl.inline"
"""Set (True) in a Flask app's ``extensions`` when the app defers blocking requests."""
DEFERRED_ENVIRON_KEY = "edl.deferred"
"""Set (True) in the environ by an app that deferred the request; its answer is discarded."""

_on_loop: contextvars.ContextVar[bool] = contextvars.ContextVar("edl_on_loop", default=False)


class WouldBlock(Exception):
    """Raised by :func:`may_block` on the event loop: run this request on a thread."""


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
