"""One table per command: each option's flag, environment variable, type, default and help.

argparse, the environment defaults and the docs tables are generated from the same `Option`
rows, so a default lives once and a new option is parsed, documented and tested (the unit
suite feeds every row its `Kind.bad` value) without another edit. Every value is text until
`read` converts it; a value that does not convert is one `ConfigError` line naming what the
user wrote: ``--port='x': not an integer`` or ``EDL_MEMBER_TTL='1': ...``.

Precedence, for every option: the flag, else the environment variable, else the default; an
empty flag or variable counts as not given.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from edl_common.durations import parse_duration
from edl_common.errors import ConfigError


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are a `ConfigError` (one line), not the usage block."""

    def error(self, message: str) -> NoReturn:
        """Raises instead of printing usage and exiting."""
        raise ConfigError(f"{message} (see `{self.prog} --help`)")


@dataclass(frozen=True)
class Kind:
    """How an option's text becomes a value, and a text it refuses (for the unit suite)."""

    name: str
    """The type as the docs table shows it: ``integer``, ``duration``..."""
    parse: Callable[[str], Any]
    """Text to value; raises `ConfigError` or `ValueError` with a short reason."""
    bad: str | None
    """A text `parse` refuses; None where every text is accepted (free text, paths)."""
    choices: tuple[str, ...] = ()
    """The accepted texts, where there is a fixed set (shown in ``--help`` as ``{a,b}``)."""
    repeatable: bool = False
    """The flag may be given again; the values are joined with commas (a comma list)."""


def _int(text: str, low: int | None, high: int | None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigError("not an integer") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise ConfigError(f"must be {_range(low, high)}")
    return value


def _range(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f"{low:g}-{high:g}"
    return f">= {low:g}" if low is not None else f"<= {high:g}"


def integer(low: int | None = None, high: int | None = None) -> Kind:
    """Whole numbers, optionally bounded (inclusive)."""
    name = "integer" if low is None and high is None else f"integer {_range(low, high)}"
    bad = "x" if low is None else str(low - 1)
    return Kind(name, lambda text: _int(text, low, high), bad)


def number(low: float | None = None, above: bool = False) -> Kind:
    """Finite decimal numbers ``>= low`` (``> low`` with `above`)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ConfigError("not a number") from None
        if not math.isfinite(value):
            raise ConfigError("not a finite number")
        if low is not None and (value <= low if above else value < low):
            raise ConfigError(f"must be {'>' if above else '>='} {low:g}")
        return value

    name = "number" if low is None else f"number {'>' if above else '>='} {low:g}"
    return Kind(name, parse, "x" if low is None else "-1")


def duration(allow_zero: bool = False) -> Kind:
    """A Kubernetes duration (``1m30s``, ``300ms``) or plain seconds; seconds as a float."""
    return Kind(
        "duration >= 0" if allow_zero else "duration",
        lambda text: parse_duration(text, allow_zero=allow_zero),
        "soon",
    )


def byte_size(low: int = 0) -> Kind:
    """A Kubernetes quantity of bytes (``512Mi``, ``1G``, ``1048576``) ``>= low``; bytes."""

    def parse(text: str) -> int:
        # here, not at the top: the quantity grammar imports the kubernetes client (a second
        # of start-up every CLI would pay for one option)
        from edl_common.quantity import QuantityError, parse_quantity

        try:
            value = parse_quantity(text)
        except QuantityError as e:
            raise ConfigError(str(e)) from None
        if value != value.to_integral_value() or value < low:
            raise ConfigError(f"must be a whole number of bytes >= {low}")
        return int(value)

    return Kind("bytes (quantity)", parse, "-1")


def choice(*values: str, fold: bool = False) -> Kind:
    """One of `values` (with `fold`, in any case; the value is then the one in `values`)."""
    known = {(v.lower() if fold else v): v for v in values}

    def parse(text: str) -> str:
        found = known.get(text.lower() if fold else text)
        if found is None:
            raise ConfigError(f"expected one of {', '.join(values)}")
        return found

    return Kind(" | ".join(values), parse, "no-such-" + values[0], values)


def _switch(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError("expected true or false")


def _list(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


TEXT = Kind("text", str, None)
PATH = Kind("path", Path, None)
SWITCH = Kind("switch", _switch, "maybe")
"""A flag without a value; its variable takes true/false (1/0, yes/no, on/off)."""
TOGGLE = Kind("switch", _switch, "maybe")
"""A `SWITCH` that is on by default: ``--x`` / ``--no-x``."""
LIST = Kind("list", _list, None, repeatable=True)
"""Comma separated; the flag is repeatable (``--x a --x b`` is ``a,b``)."""


@dataclass(frozen=True)
class Option:
    """One setting, as a flag, an environment variable, a docs row and a field."""

    name: str
    """The field it sets (and the argparse destination)."""
    flag: str | None
    """``--port``; None: the environment variable only."""
    env: str | None
    """``EDL_AGENT_PORT``; None: the flag only."""
    kind: Kind
    default: str | None
    """The default as a user would write it; None: unset."""
    help: str
    group: str = ""
    aliases: tuple[str, ...] = ()
    """More flags for the same option (an older spelling)."""
    bad: str | None = None
    """A refused value, where the kind's own is accepted by this option."""

    @property
    def refused(self) -> str | None:
        """A value this option refuses (the unit suite feeds it to every CLI)."""
        return self.bad if self.bad is not None else self.kind.bad

    def parse(self, text: str, label: str) -> Any:
        """`text` converted; a `ConfigError` naming `label` (the flag or variable)."""
        try:
            return self.kind.parse(text)
        except (ConfigError, ValueError) as e:
            reason = str(e).replace(f" {text!r}", "", 1).removeprefix(f"{text!r}").strip(": ")
            raise ConfigError(f"{label}={text!r}: {reason or 'invalid'}") from e

    def describe_default(self) -> str:
        """The default for help and docs."""
        if self.kind in (SWITCH, TOGGLE):
            return "off" if self.default in (None, "false") else "on"
        return "" if self.default is None else self.default


def field_default(cls: type[Any], name: str) -> Any:
    """The default of dataclass `cls`'s field `name`, for a table row that fills that field.

    The row's default is then written once, on the field, even where `cls` has other fields
    without defaults (so that no instance can be built here).

    Raises:
        KeyError: `cls` has no field `name`, or the field has no default.
    """
    for f in dataclasses.fields(cls):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            break
    raise KeyError(f"{cls.__name__}.{name} has no default")


def read(
    options: Iterable[Option], flags: Mapping[str, Any], env: Mapping[str, str]
) -> dict[str, Any]:
    """Every option's value: the flag, else the variable, else the default (empty: not given).

    `flags` is argparse's namespace as a dict (None: not given; a list for a repeated flag).

    Raises:
        ConfigError: one line naming the flag or variable and what is wrong with its value.
    """
    values: dict[str, Any] = {}
    for option in options:
        given = flags.get(option.name)
        if isinstance(given, list):
            given = ",".join(given)
        if isinstance(given, bool) and option.kind in (SWITCH, TOGGLE):
            given = "true" if given else "false"
        if given not in (None, ""):
            values[option.name] = option.parse(str(given), option.flag or option.name)
        elif option.env and env.get(option.env, "").strip():
            values[option.name] = option.parse(env[option.env].strip(), option.env)
        elif option.default is not None:
            values[option.name] = option.parse(option.default, f"default of {option.name}")
        else:
            values[option.name] = None
    return values


def label(options: Iterable[Option], name: str) -> str:
    """How the user sets `name`: ``--flag / EDL_VAR``, for messages about combinations."""
    for option in options:
        if option.name == name:
            return " / ".join(x for x in (option.flag, option.env) if x)
    raise KeyError(name)


def add_arguments(
    parser: argparse.ArgumentParser,
    options: Iterable[Option],
    groups: Mapping[str, str] | None = None,
) -> None:
    """Add every option that has a flag; `groups` maps a group title to its description.

    Every flag is parsed as text (conversion is `read`'s), so flags and variables fail alike.
    """
    made: dict[str, Any] = {}
    for option in options:
        if option.flag is None:
            continue
        if option.group not in made:
            made[option.group] = (
                parser.add_argument_group(option.group, (groups or {}).get(option.group))
                if option.group
                else parser
            )
        target = made[option.group]
        shown = [x for x in (option.env, _default_words(option)) if x]
        help_text = option.help + (f" ({'; '.join(shown)})" if shown else "")
        kwargs: dict[str, Any] = {"dest": option.name, "default": None, "help": _escape(help_text)}
        if option.kind is SWITCH:
            kwargs["action"] = "store_true"
        elif option.kind is TOGGLE:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif option.kind.choices:
            kwargs["metavar"] = "{" + ",".join(option.kind.choices) + "}"
        else:
            kwargs["metavar"] = option.kind.name.split(" ")[0].upper()
        if option.kind.repeatable:
            kwargs["action"] = "append"
        target.add_argument(option.flag, *option.aliases, **kwargs)


def _default_words(option: Option) -> str:
    shown = option.describe_default()
    return f"default {shown}" if shown and option.kind not in (SWITCH, TOGGLE) else ""


def _escape(text: str) -> str:
    return text.replace("%", "%%")


def markdown_table(options: Sequence[Option]) -> str:
    """The docs table of `options`: flag, variable, type, default, meaning."""
    with_env = any(option.env for option in options)
    head = ["Flag", *(["Environment"] if with_env else []), "Type", "Default", "Meaning"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for option in options:
        default = option.describe_default()
        cells = [
            ", ".join(f"`{f}`" for f in (option.flag, *option.aliases) if f) or "—",
            *([f"`{option.env}`" if option.env else "—"] if with_env else []),
            option.kind.name,
            f"`{default}`" if default else "—",
            option.help,
        ]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


def replace_block(text: str, name: str, table: str) -> str:
    """`text` with the lines between ``<!-- options:NAME -->`` and ``<!-- /options -->`` set.

    Raises:
        KeyError: the document has no such block.
    """
    start, end = f"<!-- options:{name} -->\n", "<!-- /options -->"
    head, sep, rest = text.partition(start)
    if not sep or end not in rest:
        raise KeyError(f"no {start.strip()} ... {end} block")
    return head + start + table + rest[rest.index(end) :]
