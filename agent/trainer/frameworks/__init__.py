"""The frameworks a trainer can train with: a name -> module registry.

Each module (a folder beside this file) exposes ``FRAMEWORK``, a `Framework` descriptor that
imports nothing heavy; its ``collective()`` imports the framework itself. Adding a framework
is one folder plus one line in `FRAMEWORKS`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from importlib import import_module

from agent.errors import ConfigError
from agent.protocol import env as names
from agent.protocol.trainer_world import TrainerWorld
from agent.trainer.frameworks.base import Framework, generation_from_env

FRAMEWORKS: dict[str, str] = {
    "paddle": "agent.trainer.frameworks.paddle",
    "torch": "agent.trainer.frameworks.torch",
}
"""Registry: framework name -> module exposing ``FRAMEWORK``."""

AUTO = "auto"
"""``--framework auto``: the agent learns the framework from its trainer."""


def get(name: str) -> Framework:
    """The registered framework `name`; raises `ConfigError` for an unknown one."""
    try:
        module = FRAMEWORKS[name]
    except KeyError:
        raise ConfigError(
            f"unknown framework {name!r}: expected one of {', '.join(FRAMEWORKS)}"
        ) from None
    framework: Framework = import_module(module).FRAMEWORK
    return framework


def all_frameworks() -> list[Framework]:
    """Every registered framework, in registry order."""
    return [get(name) for name in FRAMEWORKS]


def imported(modules: Mapping[str, object] | None = None) -> list[Framework]:
    """The registered frameworks whose module this process has imported."""
    modules = sys.modules if modules is None else modules
    return [f for f in all_frameworks() if f.module in modules]


def launched_for(env: Mapping[str, str]) -> Framework | None:
    """The first registered framework whose world variables are set in `env`, if any."""
    for framework in all_frameworks():
        if any(env.get(n, "").strip() for n in framework.env_names):
            return framework
    return None


def choose(
    env: Mapping[str, str],
    explicit: str | None = None,
    modules: Mapping[str, object] | None = None,
) -> Framework:
    """The framework a trainer uses: `explicit`, else ``EDL_FRAMEWORK``, else the one it imported.

    Raises:
        ConfigError: none of them says, or the script imported several frameworks.
    """
    name = explicit or env.get(names.FRAMEWORK, "").strip()
    if name and name != AUTO:
        return get(name)
    found = imported(modules)
    if len(found) == 1:
        return found[0]
    what = "imports none of" if not found else "imports several of"
    raise ConfigError(
        f"cannot tell the framework: the script {what} {', '.join(FRAMEWORKS)}; "
        f"set {names.FRAMEWORK} or pass framework=..."
    )


def world_from_env(env: Mapping[str, str], framework: Framework | None = None) -> TrainerWorld:
    """The trainer's world in the variables of `framework` (or ``EDL_FRAMEWORK``'s).

    Without either, whichever framework's variables are set; with none set it is a world of
    one rank (a bare run, or a warm stand-by).
    """
    name = env.get(names.FRAMEWORK, "").strip()
    if framework is None and name and name != AUTO:
        framework = get(name)
    framework = framework or launched_for(env)
    if framework is None:
        return TrainerWorld(generation=generation_from_env(env))
    return framework.world_from_env(env)
