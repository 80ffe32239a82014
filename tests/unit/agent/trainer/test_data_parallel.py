"""`ElasticDataParallel`'s models in a real gloo world of three processes (slow: frameworks).

Each rank trains its share of one global batch, split unevenly (4/3/3, then 1/1/0 with an
empty share): every rank's gradients must be the mean gradient of the whole global batch, as
one process computes it. For PyTorch the DDP is then dropped and rebuilt on a new group (a
world change in-process) and must agree again. A rank that dies mid-step is a lost peer to
the others: a failure they can tell from a crash, never an abort of the process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.net import free_port
from tests.unit.agent.trainer.ranks import PEER_LOST_EXIT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # three framework processes each

ROOT = Path(__file__).resolve().parents[4]
SIZE = 3


def start(framework: str, case: str, rank: int, port: int) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "tests.unit.agent.trainer.ranks", framework, case]
    return subprocess.Popen(
        [*cmd, str(rank), str(SIZE), str(port)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def world(framework: str, case: str) -> list[tuple[int, dict[str, Any], str]]:
    """(exit status, its JSON line or {}, stderr tail) of each rank; a port another process
    took between our pick and the store's bind is tried again."""
    for _ in range(3):
        port = free_port()
        procs = [start(framework, case, rank, port) for rank in range(SIZE)]
        results = []
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=600)  # a bound on a hang, not a speed
            except subprocess.TimeoutExpired:
                for p in procs:
                    p.kill()
                raise
            lines = [line for line in out.splitlines() if line.startswith("{")]
            results.append((proc.returncode, json.loads(lines[-1]) if lines else {}, err[-3000:]))
        if not any("EADDRINUSE" in err for _, _, err in results):
            return results
    return results


def assert_one_process(result: dict[str, Any], name: str) -> None:
    for got, want in zip(result[name], result["one_process"][name], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_pytorch_ddp_gradients_are_the_global_batch_mean_however_it_is_split() -> None:
    pytest.importorskip("torch")
    ranks = world("torch", "uneven")
    for status, result, err in ranks:
        assert status == 0, err
        assert result["ddp"]
        assert_one_process(result, "uneven")
        assert_one_process(result, "tiny")  # rank 2's empty share weighed nothing
        assert result["rebuilt"] == result["uneven"]  # the DDP of the new group agrees
        assert result["comm_bytes"] > 0 and result["comm_calls"] == 3  # one record a step
        assert result["grads_in_buckets"] == [True, True, True]  # before and after the rebuild
    assert ranks[0][1]["uneven"] == ranks[2][1]["uneven"]


def test_pytorch_ranks_that_lose_a_peer_see_a_failed_all_reduce() -> None:
    pytest.importorskip("torch")
    survivors = world("torch", "lose")[:-1]
    for status, result, err in survivors:
        assert status == 0, err
        assert result == {"ddp": True, "raised": "RuntimeError", "failed": True}


def test_paddle_gradients_are_the_global_batch_mean_however_it_is_split() -> None:
    pytest.importorskip("paddle")
    ranks = world("paddle", "uneven")
    for status, result, err in ranks:
        assert status == 0, err
        assert result["buckets"] > 1  # a bucket per parameter here: all-reduced one by one
        assert_one_process(result, "uneven")
        assert_one_process(result, "tiny")
        assert result["comm_bytes"] > 0 and result["comm_calls"] == 2


def test_paddle_ranks_that_lose_a_peer_save_and_leave_instead_of_aborting() -> None:
    """Paddle's own DataParallel aborts the process here (gloo::IoException in its engine)."""
    pytest.importorskip("paddle")
    survivors = world("paddle", "lose")[:-1]
    for status, result, err in survivors:
        assert status == PEER_LOST_EXIT, err
        assert "gradient all-reduce failed" in result["peer_lost"]
