"""In-process re-initialisation of Paddle's gloo collective (private APIs, version-gated).

Paddle 3.3.1 cannot re-run `init_parallel_env` in one process (the default group, the global
TCPStore and the comm-context keys are all set once; a second call returns the stale world). This
module side-steps every one of those singletons instead of resetting them: each generation
gets its own `ProcessGroupGloo` with group id ``GID_BASE + generation`` and its own `Group`,
passed explicitly to every collective, over a *fresh* `core.TCPStore` on the endpoint the
generation's rendezvous handed out (`agent.trainer.rendezvous`: a port of rank 0's host, held
on every address until this store binds it). Never a reused one: a TCPStore server that served
an earlier group hands a later group stale gloo addresses (``address.cc:30 sizeof(impl_) ==
bytes.size(). 136 vs 45``: a world of 4 reading a world of 2's address) or hangs it until the
store timeout.

Releasing a generation (`Generations.release`, before the next one forms): Paddle keeps every
`ProcessGroupGloo` it creates in a process-wide map (``ProcessGroupIdMap``), and each holds its
store, so a store (rank 0: its listening socket; the others: a connection to it) lived as long
as the process: one more listening socket per generation rank 0 hosted (3 -> 14 over 30
rescales, issue 37). `core.ProcessGroupIdMap.destroy()` empties that map (Paddle calls it at
exit); with our own references dropped, the previous generation's group and store close. Paddle
also keeps the newest store as its comm-context manager's "current" one, replaced by the next
group's, so at most one store outlives its generation. What it keeps per group id (a gloo comm
context, no listening socket) is bounded by `EDL_REINIT_LIMIT`. Only Paddle's cached
`ParallelEnv` is refreshed. Every trainer of a job forms its groups this way once the self-test
passes (the same image gives the same answer), so fresh joiners and in-process survivors meet
in the same group.

What would retire this module: a Paddle whose `init_parallel_env` can be called again after
`destroy_process_group` (as torch's `init_process_group` can), with the store released.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import paddle
import paddle.distributed as dist

from agent.protocol.errors import ElasticError
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer.frameworks.paddle import FRAMEWORK
from agent.trainer.frameworks.paddle.store_nodelay import StoreNoDelay
from edl_common.ports import hold_port

log = logging.getLogger(__name__)

TESTED_PADDLE_VERSIONS = ("3.3.1",)
"""Versions whose private APIs this module was written and tested against."""
GID_BASE = 1000
"""Group ids of elastic generations; far above the ids Paddle hands out itself."""


class InProcessUnsupported(ElasticError):
    """The installed Paddle cannot re-initialise its collective in-process."""


@dataclass
class FormedGroup:
    """One generation's collective."""

    group: Any
    generation: int


class Generations:
    """The store and group of the generation this process is in; released before the next."""

    def __init__(self) -> None:
        self._store: Any = None
        self._group: Any = None

    def keep(self, store: Any, group: Any) -> None:
        """The generation just formed (its store must outlive its group's formation)."""
        self._store, self._group = store, group

    def release(self) -> None:
        """Closes the previous generation's group and store (see the module's docstring).

        The caller drops its own references to the old group first (`PaddleCollective` does:
        a `Group` still referenced keeps its process group, and so the store, alive).
        """
        core, _, _ = _private_api()
        self._store = self._group = None
        core.ProcessGroupIdMap.destroy()


def _private_api() -> tuple[Any, Any, Any]:
    try:
        from paddle.base import core
        from paddle.distributed import parallel
        from paddle.distributed.communication.group import Group
    except ImportError as e:
        raise InProcessUnsupported(f"private API missing: {e}") from e
    for owner, name in (
        (core, "TCPStore"),
        (core, "ProcessGroupGloo"),
        (core, "ProcessGroupIdMap"),
    ):
        if not hasattr(owner, name):
            raise InProcessUnsupported(f"paddle.base.core.{name} is missing")
    if not hasattr(core.ProcessGroupIdMap, "destroy"):
        raise InProcessUnsupported("paddle.base.core.ProcessGroupIdMap.destroy is missing")
    if not hasattr(parallel, "_global_parallel_env"):
        raise InProcessUnsupported("paddle.distributed.parallel._global_parallel_env is missing")
    return core, parallel, Group


def self_test(backend: str) -> str | None:
    """None when in-process re-init is supported here; else why not (one line).

    Checks the version, the private names, and forms a real one-rank gloo group on a port
    held free on every address (tens of milliseconds), then releases it, so a Paddle whose
    internals moved is caught before the first rescale, not during it.
    """
    if backend != "gloo":
        return f"backend {backend or 'auto'} (only gloo re-initialises in-process)"
    version = str(vars(paddle).get("__version__", "unknown"))
    if version not in TESTED_PADDLE_VERSIONS:
        return f"paddle {version} is not one of the tested {TESTED_PADDLE_VERSIONS}"
    try:
        core, _, group_cls = _private_api()
        with hold_port() as held:  # Paddle's store binds 0.0.0.0, and aborts if it cannot
            held.share()
            with StoreNoDelay(held.port):
                store = core.TCPStore("127.0.0.1", held.port, True, 1, 10)
                pg = core.ProcessGroupGloo.create(store, 0, 1, GID_BASE - 1)
        group = group_cls(0, GID_BASE - 1, [0], pg=pg, name="edl_self_test")
        probe = paddle.to_tensor([2.0])
        dist.all_reduce(probe, group=group)
        del store, pg, group
        Generations().release()
        if float(probe.numpy()[0]) != 2.0:
            return "self-test all-reduce gave a wrong result"
    except Exception as e:
        return f"self-test failed: {e}"
    return None


def form_group(world: TrainerWorld, timeout_seconds: int, generations: Generations) -> FormedGroup:
    """Creates this generation's gloo group over a fresh store at `world.master` (rank 0's).

    The previous generation's group and store are released first. The caller has met every
    rank first (`agent.trainer.rendezvous`), so rank 0 listens before anyone dials (no client
    hits Paddle's 3 s connect retry) and nobody is missing.
    """
    core, parallel, group_cls = _private_api()
    generations.release()
    os.environ.update(FRAMEWORK.launch_env(world))
    parallel._global_parallel_env = None  # dist.get_rank() must see the new rank
    host, _, port = world.master.rpartition(":")
    gid = GID_BASE + world.generation
    # num_workers 1: rank 0's store does not wait in its constructor for clients that
    # connect only once it exists; the gloo rendezvous below waits for every rank's keys.
    with StoreNoDelay(int(port)):  # ~40 ms per store round trip otherwise (store_nodelay.py)
        store = core.TCPStore(host, int(port), world.rank == 0, 1, timeout_seconds)
        pg = core.ProcessGroupGloo.create(store, world.rank, world.world_size, gid)
    group = group_cls(
        world.rank, gid, list(range(world.world_size)), pg=pg, name=f"edl_g{world.generation}"
    )
    generations.keep(store, group)
    return FormedGroup(group, world.generation)
