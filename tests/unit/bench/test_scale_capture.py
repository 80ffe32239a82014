"""A captured sizing round replays to the plan the round made on the live values.

bench/scale_capture.py is how a real cluster's round is profiled away from the cluster: a
capture that lost anything on its way through the file (a job's read-only mapping, a node's
taints, the history) would profile a different round than the adapter ran.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from bench.scale_capture import replay, write
from bench.scale_round import Side, World, pods_of
from edl_sizing import SizingPolicy
from edl_sizing.history import SizeHistory
from edl_sizing.sizing_round import run_round

pytestmark = pytest.mark.unit


def test_a_replayed_capture_makes_the_live_rounds_plan(tmp_path: Path) -> None:
    world = World(60, 12)
    side = Side("events", True, world)
    side.sink.replace(pods_of(60, 12))
    snapshot = side.snapshot()
    history = SizeHistory()
    for job in snapshot.jobs[:4]:  # a history with measured sizes, as on a real cluster
        history.observe(job.key, 1, 100.0, world.t - 120, 1)
        history.observe(job.key, 2, 180.0, world.t - 60, 1)
    policy = SizingPolicy(hold_off_s=0.0)
    live = run_round(snapshot, history, policy, world.t)
    assert live.error is None and any(d.desired != d.current for d in live.plan.jobs.values())
    text = json.dumps(live.plan.to_dict(), sort_keys=True, separators=(",", ":"))
    path = tmp_path / "round.pickle"
    write({"snapshot": snapshot, "history": history.to_json(), "now": world.t,
           "policy": policy}, path)  # fmt: skip

    replayed = replay(path, repeat=1, profile=False, top=0)

    assert replayed["digest"] == hashlib.sha256(text.encode()).hexdigest()[:16]
    assert (replayed["nodes"], replayed["jobs"]) == (60, 12)
