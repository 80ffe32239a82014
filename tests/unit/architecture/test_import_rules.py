"""The import rules of docs/architecture.md, checked over every module of the code base.

A new edge between packages or between the adapter's rooms fails here until the rule (and the
page) says it is allowed: the layout stays what the page tells a newcomer. So does a new
package folder or a new top-level module of the adapter that the page does not name, and a
relative import (the rules read absolute module paths).
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
OURS = ("agent", "edl_common", "edl_sizing", "edl_sim", "metrics_adapter")

# Each package of ours and the packages of ours it may import (besides itself).
PACKAGE_RULES: dict[str, frozenset[str]] = {
    "edl_common": frozenset(),
    "edl_sizing": frozenset({"edl_common"}),
    "agent": frozenset({"edl_common"}),
    "metrics_adapter": frozenset({"edl_common", "edl_sizing"}),
    "edl_sim": frozenset({"edl_common", "edl_sizing"}),
}

# The adapter's top-level modules, each named on the page: those every room may import (the
# room "."), and those nothing but the entry point imports (the console script, the CLI, its
# option table, the wiring, the preflight check, the process's memory tuning).
TOP_LEVEL_SHARED = frozenset(
    {"errors", "settings", "periodic", "filewatch", "selfmetrics", "bounded_cache"}
)
TOP_LEVEL_ASSEMBLY = frozenset(
    {"entry", "cli", "options", "assembly", "preflight", "process_memory", "__main__"}
)
# Inside metrics_adapter: the rooms in one order, highest first; rooms of one level do not
# import each other. A room imports only the rooms below it: no upward import.
ROOM_ORDER: tuple[frozenset[str], ...] = (
    frozenset({"http"}),
    frozenset({"api"}),
    frozenset({"auth", "providers"}),
    frozenset({"sizing"}),
    frozenset({"scraping"}),
    frozenset({"kube"}),
    frozenset({"."}),
)
ROOM_RULES: dict[str, frozenset[str]] = {
    room: frozenset().union(*ROOM_ORDER[level + 1 :])
    for level, rooms in enumerate(ROOM_ORDER)
    for room in rooms
}

# Third-party modules edl_sizing may import: it does no I/O and reads no clock.
SIZING_THIRD_PARTY = frozenset({"yaml"})
SIZING_FORBIDDEN_STDLIB = frozenset(
    {"os", "socket", "subprocess", "time", "pathlib", "urllib", "http", "asyncio", "requests"}
)


def modules(package: str) -> Iterator[tuple[Path, str]]:
    for path in sorted((REPO / package).rglob("*.py")):
        yield path, ".".join(path.relative_to(REPO).with_suffix("").parts)


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """Every module ``path`` imports (at any depth: a lazy import counts too).

    A relative import is yielded as ``.`` followed by what it names (`violations` refuses it).
    """
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            yield node.lineno, "." * node.level + (node.module or "")
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for alias in node.names:  # `from metrics_adapter import wire` names a module
                yield node.lineno, f"{node.module}.{alias.name}"


def room_of(module: str) -> str | None:
    """The adapter room of a module path (None: an entry-point/assembly module)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "."
    if (REPO / "metrics_adapter" / parts[1]).is_dir():
        return parts[1]
    if parts[1] in TOP_LEVEL_ASSEMBLY:
        return None
    if parts[1] in TOP_LEVEL_SHARED:
        return "."
    return "<not a module>"


def top_level_modules() -> list[str]:
    """The adapter's top-level modules (``metrics_adapter/<name>.py``, but ``__init__``)."""
    return sorted(p.stem for p in (REPO / "metrics_adapter").glob("*.py") if p.stem != "__init__")


def violations() -> list[str]:
    found: list[str] = [
        f"metrics_adapter/{name}.py: a top-level module neither shared nor for the entry point "
        "only: add it to TOP_LEVEL_SHARED or TOP_LEVEL_ASSEMBLY here and to the page"
        for name in top_level_modules()
        if name not in TOP_LEVEL_SHARED | TOP_LEVEL_ASSEMBLY
    ]
    for package, allowed in PACKAGE_RULES.items():
        for path, module in modules(package):
            where = f"{path.relative_to(REPO)}"
            for line, target in imports(path):
                if target.startswith("."):
                    found.append(f"{where}:{line}: relative import {target}: write it absolute")
                    continue
                top = target.split(".")[0]
                if top in OURS and top != package and top not in allowed:
                    found.append(f"{where}:{line}: {package} may not import {target}")
                if package == "edl_sizing" and (
                    top in SIZING_FORBIDDEN_STDLIB
                    or (top not in OURS and top not in SIZING_THIRD_PARTY and not _stdlib(top))
                ):
                    found.append(f"{where}:{line}: edl_sizing is pure, may not import {target}")
            if package == "metrics_adapter":
                here = room_of(module)
                if here is None:
                    continue
                for line, target in imports(path):
                    if not target.startswith("metrics_adapter."):
                        continue
                    there = room_of(target)
                    if there == "<not a module>" or there == here:
                        continue
                    if there is None:
                        found.append(f"{where}:{line}: only the entry point imports {target}")
                    elif there not in ROOM_RULES[here]:
                        found.append(f"{where}:{line}: room {here} may not import {target}")
    return found


def page_gaps(page: str) -> list[str]:
    """What of the code base docs/architecture.md (text `page`) does not name.

    Every package folder (``name/``) and every top-level module of the adapter, either in
    backquotes (`` `kube_client` ``) or as its file (``cli.py``).
    """
    gaps: list[str] = []
    for package in OURS:
        root = REPO / package
        for folder in [root, *sorted(p for p in root.rglob("*") if p.is_dir())]:
            if folder.name == "__pycache__" or not (folder / "__init__.py").exists():
                continue
            rel = folder.relative_to(REPO).as_posix()
            if not re.search(rf"(^|\s){re.escape(folder.name)}/", page):
                gaps.append(f"{rel}/ is not on the page")
    for name in top_level_modules():
        if name == "__main__":
            continue  # the entry point: `python -m metrics_adapter`
        if f"`{name}`" not in page and not re.search(rf"(^|\s){re.escape(name)}\.py\b", page):
            gaps.append(f"metrics_adapter/{name}.py is not on the page")
    return gaps


def _stdlib(name: str) -> bool:
    return name in sys.stdlib_module_names or name == "__future__"


def test_every_import_keeps_the_rules_of_docs_architecture() -> None:
    assert violations() == []


def test_the_rules_catch_a_broken_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken tree: a sizer module that reads the clock, an adapter room reaching for the CLI,
    the simulator reaching into the adapter, a relative import, and a top-level module of the
    adapter that neither the rules nor the page name: each is found."""
    fake = tmp_path
    for package in OURS:
        (fake / package).mkdir()
        (fake / package / "__init__.py").write_text("")
    (fake / "edl_sizing" / "decision.py").write_text("import time\nimport metrics_adapter.cli\n")
    (fake / "metrics_adapter" / "cli.py").write_text("")
    (fake / "metrics_adapter" / "errors.py").write_text("")
    (fake / "metrics_adapter" / "stray.py").write_text("")
    (fake / "metrics_adapter" / "api").mkdir()
    (fake / "metrics_adapter" / "api" / "__init__.py").write_text("")
    (fake / "metrics_adapter" / "api" / "routes.py").write_text("from metrics_adapter import cli\n")
    (fake / "metrics_adapter" / "api" / "wire.py").write_text("from ..errors import ConfigError\n")
    (fake / "metrics_adapter" / "auth").mkdir()
    (fake / "metrics_adapter" / "auth" / "__init__.py").write_text("")
    (fake / "edl_sim" / "x.py").write_text("from metrics_adapter.api import routes\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", fake)
    found = "\n".join(violations())
    assert "edl_sizing is pure, may not import time" in found
    assert "edl_sizing may not import metrics_adapter.cli" in found
    assert "only the entry point imports metrics_adapter.cli" in found
    assert "edl_sim may not import metrics_adapter.api" in found
    assert "metrics_adapter/api/wire.py:1: relative import ..errors: write it absolute" in found
    assert "metrics_adapter/stray.py: a top-level module neither shared" in found
    assert "metrics_adapter/errors.py" not in found
    gaps = page_gaps("metrics_adapter/\n  api/  routes\n  `errors` cli.py\n")
    assert sorted(gaps) == [
        "agent/ is not on the page",
        "edl_common/ is not on the page",
        "edl_sim/ is not on the page",
        "edl_sizing/ is not on the page",
        "metrics_adapter/auth/ is not on the page",
        "metrics_adapter/stray.py is not on the page",
    ]


def test_the_page_names_every_folder_and_every_top_level_module_of_the_adapter() -> None:
    """docs/architecture.md names each package folder and each `metrics_adapter/*.py` (a new
    room or top-level module gets its line)."""
    assert page_gaps((REPO / "docs" / "architecture.md").read_text()) == []


# Inside `agent`: the trainer library (what a training script imports), the agent process
# (`edl-agent`), and the ground both stand on. The trainer side never imports the process
# side: a script imports `agent.trainer` without the agent's CLI, exporter or supervisor.
AGENT_SIDES: dict[str, str] = {
    "agent": "ground",  # the package's __init__
    "agent.errors": "ground",
    "agent.protocol": "ground",
    "agent.checkpoints": "ground",
    "agent.trainer": "trainer",
    "agent.process": "process",
    "agent.elastic": "process",
    "agent.collectors": "process",
    "agent.__main__": "process",
}
AGENT_SIDE_RULES: dict[str, frozenset[str]] = {
    "ground": frozenset({"ground"}),
    "trainer": frozenset({"ground", "trainer"}),
    "process": frozenset({"ground", "trainer", "process"}),
}


def agent_side_of(module: str) -> str | None:
    """The side of an `agent` module: its longest prefix in `AGENT_SIDES` (None: unplaced)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        side = AGENT_SIDES.get(".".join(parts[:n]))
        if side is not None and (n > 1 or len(parts) == 1):
            return side
    return None


def agent_side_violations() -> list[str]:
    """Imports across `agent`'s sides against `AGENT_SIDE_RULES`, and modules on no side."""
    found: list[str] = []
    for path, module in modules("agent"):
        name = module.removesuffix(".__init__")
        here = agent_side_of(name)
        where = f"{path.relative_to(REPO)}"
        if here is None:
            found.append(
                f"{where}: on no side of agent: add it to AGENT_SIDES here and to the page"
            )
            continue
        for line, target in imports(path):
            if target != "agent" and not target.startswith("agent."):
                continue
            there = agent_side_of(target)
            if there is not None and there not in AGENT_SIDE_RULES[here]:
                found.append(f"{where}:{line}: the {here} side may not import {target}")
    return found


def test_the_trainer_library_never_imports_the_agent_process() -> None:
    assert agent_side_violations() == []


def test_the_sides_of_agent_catch_a_crossing_and_an_unplaced_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trainer module reaching for the CLI, the ground reaching for the trainer, and a new
    top-level module that no side names: each is found; the process importing the trainer is
    fine."""
    for folder in ("agent", "agent/trainer", "agent/process", "agent/protocol"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "agent" / "process" / "cli.py").write_text("from agent.trainer import data\n")
    (tmp_path / "agent" / "trainer" / "data.py").write_text("import agent.process.cli\n")
    (tmp_path / "agent" / "protocol" / "env.py").write_text("from agent.trainer.data import X\n")
    (tmp_path / "agent" / "stray.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    found = "\n".join(agent_side_violations())
    assert "agent/trainer/data.py:1: the trainer side may not import agent.process.cli" in found
    assert "agent/protocol/env.py:1: the ground side may not import agent.trainer.data" in found
    assert "agent/stray.py: on no side of agent" in found
    assert "agent/process/cli.py" not in found
