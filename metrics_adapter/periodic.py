"""PeriodicTask: run a function every interval on a daemon thread, surviving its failures."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class PeriodicTask:
    """Calls ``fn`` every ``interval`` seconds until stopped; exceptions are logged, not fatal.

    With ``retry_interval``, a call that returns ``False`` (not ready yet: e.g. a watch that
    has not listed) is made again after that shorter wait instead of a whole interval.
    """

    def __init__(
        self,
        name: str,
        interval: float,
        fn: Callable[[], object],
        retry_interval: float | None = None,
    ) -> None:
        self.name = name
        self.interval = interval
        self.retry_interval = retry_interval
        self._fn = fn
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (the first call runs immediately)."""
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the thread to stop and wait for it (bounded)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            wait = self.interval
            try:
                if self._fn() is False and self.retry_interval is not None:
                    wait = min(wait, self.retry_interval)
            except Exception:
                log.exception("periodic task %s failed", self.name)
            self._stop.wait(wait)
