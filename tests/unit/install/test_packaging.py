"""The distribution's metadata: its own name everywhere, a light base install, typed packages."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from edl_common.version import DISTRIBUTION, install_command
from metrics_adapter.entry import ADAPTER_MODULES

ROOT = Path(__file__).resolve().parents[3]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
PACKAGES = ("agent", "edl_common", "edl_sizing", "edl_sim", "metrics_adapter")
TRAINING_IMAGE = ("agent", "edl_common")
"""What a training image imports: the agent process and the trainer library (agent.trainer)."""


def names(requirements: list[str]) -> set[str]:
    """Normalised distribution names of requirement strings."""
    return {
        re.split(r"[\s<>=!~\[;]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements
    }


def test_the_distribution_has_its_own_name_and_the_code_reads_it() -> None:
    assert PROJECT["name"] == DISTRIBUTION == "edl-k8s"
    assert install_command("adapter") == "pip install 'edl-k8s[adapter]'"


def test_the_base_install_carries_none_of_the_adapters_server_libraries() -> None:
    adapter = names(PROJECT["optional-dependencies"]["adapter"])
    assert {"flask", "cryptography", "cachetools"} <= adapter
    assert not adapter & names(PROJECT["dependencies"])
    assert "matplotlib" not in names(PROJECT["dependencies"])
    assert "boto3" in names(PROJECT["optional-dependencies"]["s3"])
    assert not {"boto3", "botocore"} & names(PROJECT["dependencies"])
    assert "fsspec" in names(PROJECT["optional-dependencies"]["fsspec"])
    assert "fsspec" not in names(PROJECT["dependencies"])


def test_the_adapters_import_names_are_its_extras_distributions() -> None:
    """`edl-adapter` names the extra for exactly the modules the extra installs."""
    provided = packages_distributions()
    adapter = names(PROJECT["optional-dependencies"]["adapter"])
    for module in ADAPTER_MODULES:
        dists = {d.lower() for d in provided.get(module, [])}
        assert dists, f"{module} is not installed by any distribution"
        assert dists & adapter or module == "werkzeug", f"{module} comes from {dists}"
    assert {
        provided[m][0].lower() for m in ("flask", "cryptography", "cachetools", "msgspec")
    } == adapter


def test_a_training_image_imports_only_the_base_install_and_the_framework_extras() -> None:
    """The agent and the trainer library import nothing that only an extra other than a
    framework's or the remote checkpoint stores' (s3, fsspec) brings (the adapter's, the
    simulator's)."""
    provided = packages_distributions()
    extras = PROJECT["optional-dependencies"]
    allowed = names(PROJECT["dependencies"]) | names(
        extras["paddle"] + extras["torch"] + extras["gpu"] + extras["s3"] + extras["fsspec"]
    )
    seen: dict[str, set[str]] = {}
    for package in TRAINING_IMAGE:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                modules = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if isinstance(node, ast.ImportFrom) and node.level == 0
                    else []
                )
                for module in modules:
                    top = module.partition(".")[0]
                    if top in sys.stdlib_module_names or top in PACKAGES or not top:
                        continue
                    seen.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    outside = {
        top: sorted(paths)
        for top, paths in seen.items()
        if not {d.lower().replace("_", "-") for d in provided.get(top, [top])} & allowed
    }
    assert outside == {}
    assert seen.keys() & {"prometheus_client", "psutil", "kubernetes", "h11"}


def test_every_package_is_typed_and_listed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {i.rstrip("*") for i in config["packages"]["find"]["include"]} == set(PACKAGES)
    assert [p for p in PACKAGES if not (ROOT / p / "py.typed").is_file()] == []
    assert "py.typed" in config["package-data"]["*"]


def test_no_doc_installs_another_projects_edl() -> None:
    """``pip install edl`` installs an unrelated project; the historical repository's tags are
    not this code."""
    wrong = re.compile(
        r"pip install [^\n]*?(?<![\w.-])['\"]?edl(?:\[[\w,]*\])?['\"]?(?![\w.-])"
        r"|edl(?:\[[\w,]*\])? @ git\+"
    )
    docs = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "charts").rglob("*.txt")]
    docs += [*(ROOT / "edl_sim").rglob("*.py"), *(ROOT / "metrics_adapter").rglob("*.py")]
    found = [
        f"{path.relative_to(ROOT)}: {m.group(0)}"
        for path in docs
        for m in wrong.finditer(path.read_text())
    ]
    assert found == []
