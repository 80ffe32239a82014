"""Tests follow ``tests/<layer>/<package>/`` (docs/architecture.md).

A test module directly in ``tests/unit/``, ``tests/integration/`` or ``tests/e2e/`` fails here
until it moves into the folder of what it tests; so does a test package folder left without a
test (a leftover of a move).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TESTS = Path(__file__).resolve().parents[2]
LAYERS = ("unit", "integration", "e2e")


def layout_gaps(tests: Path) -> list[str]:
    """What in `tests` (a ``tests/`` folder) breaks the layout, one line each."""
    gaps: list[str] = []
    for layer in LAYERS:
        root = tests / layer
        for path in sorted(root.glob("test_*.py")):
            gaps.append(
                f"tests/{layer}/{path.name}: directly in tests/{layer}/; move it into "
                f"tests/{layer}/<package>/"
            )
        for folder in sorted(p for p in root.rglob("*") if (p / "__init__.py").is_file()):
            if not any(folder.rglob("test_*.py")):
                rel = folder.relative_to(tests).as_posix()
                gaps.append(f"tests/{rel}/: a test package without a test; delete it")
    return gaps


def test_every_test_sits_in_a_folder_of_its_layer() -> None:
    assert layout_gaps(TESTS) == []


def test_a_test_beside_the_layers_folders_and_an_empty_leftover_are_found(tmp_path: Path) -> None:
    for layer in LAYERS:
        (tmp_path / layer / "agent").mkdir(parents=True)
        (tmp_path / layer / "__init__.py").write_text("")
        (tmp_path / layer / "agent" / "__init__.py").write_text("")
        (tmp_path / layer / "agent" / "test_ok.py").write_text("")
    (tmp_path / "unit" / "test_stray.py").write_text("")
    (tmp_path / "unit" / "sizing").mkdir()
    (tmp_path / "unit" / "sizing" / "__init__.py").write_text("")
    (tmp_path / "e2e" / "controlplane").mkdir()  # build files, no package: not a test folder
    (tmp_path / "e2e" / "controlplane" / "build.sh").write_text("")
    assert layout_gaps(tmp_path) == [
        "tests/unit/test_stray.py: directly in tests/unit/; move it into tests/unit/<package>/",
        "tests/unit/sizing/: a test package without a test; delete it",
    ]
