"""`--sizing-capacity static`: the capacity file is re-read when whoever simulates the cluster
rewrites it; a broken rewrite keeps the last good view."""

from __future__ import annotations

from pathlib import Path

import pytest

from metrics_adapter.sizing.capacity_file import FileCapacitySource

ONE_NODE = "nodes: [{name: slots, allocatable: {cpu: '3'}}]\n"
WITH_POD = ONE_NODE + "pods: [{name: web-0, requests: {cpu: '2'}, priority: 1000}]\n"


def test_a_rewritten_file_is_the_next_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "capacity.yaml"
    path.write_text(ONE_NODE)
    source = FileCapacitySource(path)
    assert source.snapshot().pods == ()
    path.write_text(WITH_POD)
    (pod,) = source.snapshot().pods
    assert (pod.name, pod.priority, pod.node) == ("web-0", 1000, None)


def test_a_broken_rewrite_keeps_the_last_good_snapshot(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "capacity.yaml"
    path.write_text(WITH_POD)
    source = FileCapacitySource(path)
    path.write_text("nodes: {not: a list}\n")
    assert [p.name for p in source.snapshot().pods] == ["web-0"]
    assert "keeping the last good capacity" in caplog.text and "nodes must be a list" in caplog.text
    path.unlink()
    assert [p.name for p in source.snapshot().pods] == ["web-0"]
