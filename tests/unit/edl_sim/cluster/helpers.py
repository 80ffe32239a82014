"""Small input files for the simulator's tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from edl_sim.cluster.inputs import (
    BACKGROUND_COLUMNS,
    CLUSTER_COLUMNS,
    CURVE_COLUMNS,
    WORKLOAD_COLUMNS,
)

LINEAR_CURVE = [("lin", n, 10.0 * n) for n in (1, 2, 3, 4)]
"""10 samples/s per worker, measured at 1-4 workers."""


def write_csv(path: Path, columns: tuple[str, ...], rows: Sequence[tuple[object, ...]]) -> Path:
    lines = [",".join(columns), *(",".join(str(v) for v in row) for row in rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def inputs(
    tmp_path: Path,
    jobs: Sequence[tuple[object, ...]],
    nodes: Sequence[tuple[object, ...]] | None = None,
    curves: Sequence[tuple[object, ...]] | None = None,
    background: Sequence[tuple[object, ...]] | None = None,
) -> list[str]:
    """The `edl-sim run` file arguments for these rows."""
    args = [
        "--workload", str(write_csv(tmp_path / "workload.csv", WORKLOAD_COLUMNS, jobs)),
        "--curves", str(write_csv(tmp_path / "curves.csv", CURVE_COLUMNS, curves or LINEAR_CURVE)),
        "--cluster",
        str(write_csv(tmp_path / "cluster.csv", CLUSTER_COLUMNS, nodes or [("n", 1, 4, "8Gi", 0)])),
    ]  # fmt: skip
    if background is not None:
        path = write_csv(tmp_path / "background.csv", BACKGROUND_COLUMNS, background)
        args += ["--background", str(path)]
    return args
