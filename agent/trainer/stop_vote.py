"""The per-step stop vote, cast early inside the data-parallel model's gradient all-reduce.

At every step boundary the ranks agree whether any of them was asked to stop (a drain request
or SIGTERM): all of them then end the world at that boundary, so a planned rescale loses no
step. Asked on its own, that vote is one blocking all-reduce per step that plain DDP does not
have, every rank waiting for the slowest to reach the boundary.

A data-parallel model that all-reduces gradients during backward casts the vote instead: when
its last gradient bucket of the step goes out, it launches the flag's all-reduce right behind
it (`StopVotes.cast`), and the boundary only reads the result, long since arrived. Every rank
casts in the same bucket hook of the same step (DDP's hooks run in one order everywhere), at
most once a step, so the collectives stay matched. A step with no such all-reduce (a world
of one, ``no_sync``, a model without the wrapper) casts nothing and the boundary asks as
before. A request that arrives after this rank cast its flag is seen at the next boundary:
the world ends one step later, with nothing lost.

``EDL_STOP_VOTE=step`` turns the early vote off (one all-reduce at every boundary, as before).

Importing this module imports no framework.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.errors import ConfigError

IN_GRADIENTS = "gradients"
"""The vote rides behind the gradient all-reduce when a data-parallel model runs one."""
EVERY_STEP = "step"
"""The vote is an all-reduce of its own at every step boundary."""
MODES = (IN_GRADIENTS, EVERY_STEP)

Ballot = Callable[[], bool]
"""The result of a cast vote: waits for its all-reduce (normally long over), True to stop."""


def parse_mode(raw: str) -> str:
    """`EDL_STOP_VOTE`'s value, checked (empty: the default, `IN_GRADIENTS`).

    Raises:
        ConfigError: neither ``gradients`` nor ``step``.
    """
    mode = raw.strip().lower() or IN_GRADIENTS
    if mode not in MODES:
        raise ConfigError(f"EDL_STOP_VOTE={raw!r}: expected one of {', '.join(MODES)}")
    return mode


class StopVotes:
    """The vote of the current step, if a data-parallel model cast one (see the module)."""

    def __init__(self, mode: str = IN_GRADIENTS) -> None:
        self.enabled = mode == IN_GRADIENTS
        """Whether models may cast early (``EDL_STOP_VOTE``)."""
        self._ballot: Ballot | None = None
        self.cast_count = 0
        """Votes cast early so far (each one an all-reduce the boundary did not block on)."""

    def wanted(self) -> bool:
        """A model may cast now: early votes are on and none was cast this step."""
        return self.enabled and self._ballot is None

    def cast(self, ballot: Ballot) -> None:
        """The vote of this step went out with the gradients; `ballot` reads its result."""
        self._ballot = ballot
        self.cast_count += 1

    def take(self) -> Ballot | None:
        """The step's cast vote (None: none was), forgotten here."""
        ballot, self._ballot = self._ballot, None
        return ballot

    def clear(self) -> None:
        """A world ended: a vote cast in it is never read in the next."""
        self._ballot = None
