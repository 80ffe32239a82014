"""The request target of RFC 9112 §3.2: which form it is, and the path and query it names.

Why a module of its own: an origin-form path that merely *contains* ``://`` was once re-read
as absolute-form, so ``/ns/scratch/pods/a://h/ns/ml/...`` was authorised by kube-apiserver for
``scratch`` and routed here to ``ml``. The form is decided by the first character only: a
target that starts with ``/`` is origin-form whatever follows; absolute-form starts with a
scheme (``http:`` or ``https:`` here, the only ones a server is sent).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")


class TargetError(ValueError):
    """A request target this server does not serve (asterisk-, authority- or odd forms)."""


@dataclass(frozen=True, slots=True)
class Target:
    """The path (still percent-encoded) and query a request target names."""

    path: str
    query: str
    absolute: bool
    """The request line held absolute-form (``http://host/path``)."""


def split_target(target: str) -> Target:
    """The path and query of an origin-form or absolute-form target.

    Raises:
        TargetError: not origin-form (``/...``) nor absolute-form with an http(s) scheme.
    """
    without_fragment = target.split("#", 1)[0]
    if without_fragment.startswith("/"):
        path, _, query = without_fragment.partition("?")
        return Target(path, query, absolute=False)
    scheme = _SCHEME_RE.match(without_fragment)
    if scheme is None or scheme.group(0).lower() not in ("http:", "https:"):
        raise TargetError("the request target must be a path (origin-form) or an http(s) URI")
    rest = without_fragment[scheme.end() :]
    if not rest.startswith("//"):
        raise TargetError("an absolute-form request target needs an authority (http://host/...)")
    hier, _, query = rest[2:].partition("?")
    _, slash, path = hier.partition("/")
    return Target("/" + path if slash else "/", query, absolute=True)
