"""The packing's look-ups answer what scanning every node answers (issue 38's indexes).

`Packing.roomiest` keeps an index of the nodes by how many pods fit; `reclaimable` re-checks
only the nodes whose bound fell; `first_fit` starts after the nodes it found full, back to a
node that got room back. All three are compared with a plain scan of every node after
random places and releases, on rooms chosen to make near ties (counts 1e-9 apart, where the
scan's "beats the best by more than 1e-9" decides) and exact ties.
"""

from __future__ import annotations

import random

import pytest

from edl_sizing.cluster import Node
from edl_sizing.packing import Packing, _could_fit
from edl_sizing.resources import Resources

GI = 2**30


def scanned_roomiest(packing: Packing, requests: Resources) -> str | None:
    """The scan the index replaces (the code before issue 38's speed-ups)."""
    best: tuple[float, str] | None = None
    for node in packing.candidates((), {}):
        free = packing.free[node.name]
        if not requests.fits_in(free):
            continue
        pairs = ((requests.cpu, free.cpu), (requests.memory, free.memory),
                 (requests.gpu, free.gpu))  # fmt: skip
        count = min((have / need for need, have in pairs if need > 0), default=0.0)
        if best is None or count > best[0] + 1e-9:
            best = (count, node.name)
    return best[1] if best is not None else None


def room(rnd: random.Random) -> Resources:
    base = rnd.choice((4.0, 8.0, 8.0, 16.0))
    jitter = rnd.choice((0.0, 0.0, 4e-10, 6e-10, 1.1e-9, 2e-9, 3e-9, -5e-10))
    return Resources(cpu=base + jitter, memory=rnd.choice((64, 128)) * GI)


@pytest.mark.parametrize("seed", range(40))
def test_roomiest_reclaimable_and_first_fit_answer_as_a_scan(seed: int) -> None:
    rnd = random.Random(seed)
    nodes = [Node(f"n-{i:03d}", room(rnd)) for i in range(rnd.randint(1, 40))]
    packing = Packing(nodes, {n.name: n.allocatable for n in nodes})
    sizes = [Resources(cpu=1, memory=GI), Resources(cpu=2, memory=GI), Resources(cpu=0.5)]
    placed: list[tuple[str, Resources, str]] = []
    reclaimable: dict[Resources, set[str]] = {}
    for _ in range(300):
        size = rnd.choice(sizes)
        assert packing.roomiest(size) == scanned_roomiest(packing, size)
        first = next((n.name for n in nodes if size.fits_in(packing.free[n.name])), None)
        assert packing.first_fit(size) == first
        found = {n.name for n in packing.reclaimable(size, (), {})}
        scanned = {
            n.name
            for n in nodes
            if _could_fit(size, packing.free[n.name] + packing.worker_room.get(n.name, Resources()))
        }
        assert found == scanned & reclaimable.get(size, scanned)
        reclaimable[size] = found
        node = rnd.choice(nodes).name
        action = rnd.random()
        if action < 0.45:
            job = rnd.choice(("a", "b"))
            packing.place(node, size, job)
            placed.append((node, size, job))
        elif action < 0.6:
            packing.place(node, size)  # a pod of no job: the bound falls
        elif placed:
            node, size, job = placed.pop(rnd.randrange(len(placed)))
            packing.release(node, size, job)


@pytest.mark.parametrize("seed", range(10))
def test_placing_all_at_once_is_placing_one_after_another(seed: int) -> None:
    rnd = random.Random(seed)
    nodes = [Node(f"n-{i:03d}", room(rnd)) for i in range(rnd.randint(1, 20))]
    pods = [
        (rnd.choice(nodes).name, Resources(cpu=rnd.choice((0.1, 0.2, 0.3, 1.0)), memory=GI / 3),
         rnd.choice(("a", "b", None)))
        for _ in range(rnd.randint(0, 200))
    ]  # fmt: skip
    one, batch = (Packing(nodes, {n.name: n.allocatable for n in nodes}) for _ in range(2))
    for node, requests, job in pods[:5]:  # some workers already there
        one.place(node, requests, job)
        batch.place(node, requests, job)
    one.roomiest(Resources(cpu=1))
    batch.roomiest(Resources(cpu=1))
    for node, requests, job in pods[5:]:
        one.place(node, requests, job)
    batch.place_all(pods[5:])
    assert batch.free == one.free  # the same floats: the same sums in the same order
    assert batch.worker_room == one.worker_room
    assert batch.workers == one.workers
    assert batch.by_node == one.by_node
    assert batch.roomiest(Resources(cpu=1)) == one.roomiest(Resources(cpu=1))


def _state(packing: Packing) -> tuple[object, ...]:
    """Room and workers as the decision reads them (an emptied job's or node's map is none)."""
    return (
        dict(packing.free), dict(packing.worker_room),
        {j: dict(w) for j, w in packing.workers.items() if w},
        {n: dict(w) for n, w in packing.by_node.items() if w},
    )  # fmt: skip


@pytest.mark.parametrize("seed", range(20))
def test_a_rolled_back_transaction_leaves_the_packing_as_it_was(seed: int) -> None:
    rnd = random.Random(seed)
    nodes = [Node(f"n-{i:03d}", room(rnd)) for i in range(rnd.randint(1, 12))]
    packing = Packing(nodes, {n.name: n.allocatable for n in nodes})
    size = Resources(cpu=1, memory=GI)
    placed: list[tuple[str, str]] = []

    def change(steps: int) -> None:
        for _ in range(steps):
            if placed and rnd.random() < 0.4:
                node, job = placed.pop(rnd.randrange(len(placed)))
                packing.release(node, size, job)
            else:
                node = rnd.choice(nodes).name
                owner = rnd.choice(("a", "b", "c", None))
                packing.place(node, size, owner)  # None: a pod of no job
                if owner is not None:
                    placed.append((node, owner))

    change(30)
    before, kept = _state(packing), list(placed)
    at = packing.savepoint()
    change(25)
    packing.rollback(at)
    assert _state(packing) == before
    placed[:] = kept
    at = packing.savepoint()
    change(10)
    after = _state(packing)
    packing.commit(at)
    assert _state(packing) == after
    assert packing.first_fit(size) == next(
        (n.name for n in nodes if size.fits_in(packing.free[n.name])), None
    )
