"""No import cycle between modules of our packages.

A cycle makes a module's meaning depend on which side was imported first, and hides that two
modules are one concern. Module-level imports count, those under ``if TYPE_CHECKING:`` too
(mypy and a reader follow them); an import inside a function is a deliberate lazy import and
does not.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
OURS = ("agent", "edl_common", "edl_sizing", "edl_sim", "metrics_adapter")


def module_files(root: Path) -> dict[str, Path]:
    """Every module of our packages under `root` by its dotted name."""
    found: dict[str, Path] = {}
    for package in OURS:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements run at import: into if/try/with blocks, never into defs or classes."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.With):
            yield from _module_level(node.body)
            yield from _module_level(getattr(node, "orelse", []))
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _module_level(block)
            for handler in node.handlers:
                yield from _module_level(handler.body)


def edges(module: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The modules of ours that `module` imports at module level."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in _module_level(ast.parse(path.read_text(), str(path)).body):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                # `from agent.trainer import frameworks` names a module; otherwise the package.
                named = f"{base}.{alias.name}"
                targets.add(named if named in known else base)
    return {t for t in targets if t in known and t != module}


def cycles(root: Path) -> list[list[str]]:
    """Each strongly connected group of modules that import each other (Tarjan), sorted."""
    known = module_files(root)
    graph = {m: edges(m, p, known) for m, p in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


def test_no_import_cycle_between_our_modules() -> None:
    assert cycles(REPO) == []


def test_a_cycle_is_found_and_a_lazy_import_is_not_one(tmp_path: Path) -> None:
    """A TYPE_CHECKING import closing a loop counts; an import inside a function does not."""
    for package in OURS:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "agent" / "config.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agent.runner import R\n"
    )
    (tmp_path / "agent" / "runner.py").write_text("from agent import config\nclass R: ...\n")
    (tmp_path / "edl_sim" / "a.py").write_text("from . import b\n")
    (tmp_path / "edl_sim" / "b.py").write_text("def f() -> None:\n    from edl_sim import a\n")
    assert cycles(tmp_path) == [["agent.config", "agent.runner"]]
