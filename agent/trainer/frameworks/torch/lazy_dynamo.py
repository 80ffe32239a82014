"""``torch._dynamo`` kept out of an eager trainer: a stand-in until something compiles.

torch 2.15 loads ``torch._dynamo`` (~900 modules: ~1 s on an idle core, 2-3 s beside busy
trainers) the first time an optimizer is built, compiled or not, and only for calls that do
nothing in eager mode (no frame can be under compilation while dynamo is not loaded):

- ``torch._disable_dynamo`` (``torch/_compile.py``) wraps ``Optimizer.add_param_group``,
  ``zero_grad``, ``state_dict``, ``load_state_dict`` and the functional optimizers; its first
  call asks ``torch._dynamo.disable(fn, recursive, wrapping=False)`` and caches the answer on
  ``fn.__dynamo_disable`` (a wrapper that calls ``fn`` with dynamo's frame hook off);
- every ``Optimizer.step()`` runs ``import torch._dynamo`` and ``torch._dynamo.graph_break()``
  twice (``torch/optim/optimizer.py``, ``_use_grad_for_differentiable``);
- ``init_process_group`` calls ``torch._dynamo.trace_rules.clear_lru_cache()`` when
  ``"torch._dynamo" in sys.modules`` (``torch/distributed/distributed_c10d.py``).

`install` puts a `LazyDynamo` in ``sys.modules`` and on ``torch`` that answers exactly these
while the real module is not loaded: ``graph_break()`` does nothing, ``disable(fn, recursive,
wrapping=False)`` called from ``torch._compile`` gives ``fn`` back and remembers it,
``trace_rules.clear_lru_cache()`` does nothing (remembered), and ``is_compiling()`` is
``torch.compiler.is_compiling()``. Anything else loads the real module in its place: any other
attribute (``torch._dynamo.optimize`` from ``torch.compile``, ``torch._dynamo.utils`` from
``DistributedDataParallel``), another form of ``disable``, ``from torch._dynamo import x``, a
submodule import (``import torch._dynamo.config``: the stand-in's ``__path__`` loads it, and
a finder hands the submodule the real import made back instead of running it twice). The
load replays what the stand-in answered: each remembered ``fn.__dynamo_disable`` becomes
``real.disable(fn, recursive, wrapping=False)``, as the first call would have made it, so
code compiled later still skips those functions; it logs one line.

A script that needs dynamo (``torch.compile``, ``DistributedDataParallel``, non-reentrant
activation checkpointing) pays for the load where it first needs it: on a joiner, after it
joined, so inside the survivors' pause; ``EDL_TORCH_LAZY_DYNAMO=0`` (read by the torch
framework's descriptor) loads it while the trainer warms up instead, as does a script that
imported ``ElasticDataParallel`` before ``start()``.

A reference to the stand-in kept across the load (``import torch._dynamo as d`` before it)
still works: every answer and attribute forwards to the real module once it is loaded.
Threads: the load happens once; another thread that needs dynamo meanwhile waits for it
through importlib, as for any module being imported, then for the replay. One race is left:
a thread whose first ``_disable_dynamo`` call got ``fn`` back an instant before another
thread's load, and caches it after the replay, keeps ``fn`` undisabled (no trainer calls an
optimizer's first step in one thread while another first compiles).

State: the stand-in is process-wide by nature (it *is* ``torch._dynamo`` until replaced); it
lives in ``sys.modules``, on ``torch`` and, as its finder, on ``sys.meta_path`` (inert after the
load). This module keeps nothing else.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import logging
import os
import sys
import threading
import time
import types
from collections.abc import Callable, MutableSequence, Sequence
from typing import Any

log = logging.getLogger(__name__)

NAME = "torch._dynamo"
_CACHE = "__dynamo_disable"  # where torch._compile._disable_dynamo keeps disable's answer
_CALLER = "torch._compile"  # the only caller of disable(..., wrapping=False) in torch 2.15


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


class _Loads:
    """Loads the real module once, in place of the stand-in, and replays its answers."""

    def __init__(self, stand_in: LazyDynamo, torch_module: types.ModuleType) -> None:
        self.stand_in = stand_in
        self.torch = torch_module
        self.path = [os.path.join(os.path.dirname(str(torch_module.__file__)), "_dynamo")]
        """The real package's folder: the stand-in's ``__path__`` (this very list)."""
        self.real: types.ModuleType | None = None
        self._loader: int | None = None  # the thread loading it
        self._guard = threading.Lock()  # held for bookkeeping only, never across an import
        self._replayed = threading.Event()
        self._answered: list[tuple[Callable[..., Any], bool]] = []
        self._cleared = False

    def loading_elsewhere(self) -> bool:
        """Another thread is loading the real module now."""
        loader = self._loader
        return loader is not None and loader != threading.get_ident()

    def answer_disable(self, fn: Callable[..., Any], recursive: bool) -> bool:
        """Remembers `fn` for the replay; False once a load has begun (ask the real one)."""
        with self._guard:
            if self.real is not None or self._loader is not None:
                return False
            self._answered.append((fn, recursive))
            return True

    def answer_clear(self) -> bool:
        """Remembers a ``trace_rules.clear_lru_cache()``; False once a load has begun."""
        with self._guard:
            if self.real is not None or self._loader is not None:
                return False
            self._cleared = True
            return True

    def load(self, why: str) -> types.ModuleType:
        """The real module, loading it first if nobody has (`why`: for the log line)."""
        with self._guard:
            if self.real is not None:
                return self.real
            mine = self._loader is None
            if mine:
                self._loader = threading.get_ident()
                self._detach()
        if not mine:
            # Another thread's load: importlib waits for it (this thread's own, re-entered
            # from within it: the partly initialised module, as in any circular import).
            module = importlib.import_module(NAME)
            if self.loading_elsewhere():
                self._replayed.wait()
            return module
        started = time.monotonic()
        try:
            module = importlib.import_module(NAME)
        except BaseException:
            with self._guard:
                self._loader = None
                self._attach()  # eager training goes on; whoever needed dynamo gets the error
            raise
        with self._guard:
            answered, self._answered = self._answered, []
            cleared = self._cleared
        self._replay(module, answered, cleared)
        with self._guard:
            self.real, self._loader = module, None
        self._replayed.set()
        log.info(
            "torch._dynamo loaded late (%.2f s) for %s; %d disabled function(s) replayed "
            "(EDL_TORCH_LAZY_DYNAMO=0 loads it while the trainer warms up, before it joins)",
            time.monotonic() - started,
            why,
            len(answered),
        )
        return module

    def _detach(self) -> None:
        if sys.modules.get(NAME) is self.stand_in:
            del sys.modules[NAME]
        if self.torch.__dict__.get("_dynamo") is self.stand_in:
            del self.torch.__dict__["_dynamo"]  # importlib sets the real module there

    def _attach(self) -> None:
        if NAME not in sys.modules:
            sys.modules[NAME] = self.stand_in
        if "_dynamo" not in self.torch.__dict__:
            self.torch.__dict__["_dynamo"] = self.stand_in

    @staticmethod
    def _replay(
        real: types.ModuleType,
        answered: Sequence[tuple[Callable[..., Any], bool]],
        cleared: bool,
    ) -> None:
        for fn, recursive in answered:
            if getattr(fn, _CACHE, None) not in (None, fn):
                continue  # someone else cached another answer: theirs stands
            try:
                setattr(fn, _CACHE, real.disable(fn, recursive, wrapping=False))
            except Exception as e:  # let its next call ask the real module (and fail there)
                log.warning("torch._dynamo.disable(%r) on replay: %s", fn, e)
                if hasattr(fn, _CACHE):
                    delattr(fn, _CACHE)
        if cleared:
            real.trace_rules.clear_lru_cache()


class _ReuseSubmodule(importlib.abc.Loader):
    """Hands back a submodule that the real module's import already made."""

    def __init__(self, module: types.ModuleType) -> None:
        self._module = module
        self._spec = module.__spec__

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return self._module

    def exec_module(self, module: types.ModuleType) -> None:
        if module.__spec__ is not self._spec:  # importlib wrote ours over it (if it could)
            module.__spec__ = self._spec


class _Finder(importlib.abc.MetaPathFinder):
    """``import torch._dynamo.x`` through the stand-in: the load made ``x``, do not rerun it.

    importlib looks the stand-in's ``__path__`` up (which loads the real module, and with it
    most submodules) before it asks the finders, and would then execute ``x`` a second time.
    Acts only on a lookup through the stand-in's own path list: inert after the load.
    """

    def __init__(self, loads: _Loads) -> None:
        self._loads = loads

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if path is not self._loads.path or self._loads.real is None:
            return None
        module = sys.modules.get(fullname)
        if module is None or getattr(module, "__spec__", None) is None:
            return None
        origin = getattr(module.__spec__, "origin", None)
        return importlib.machinery.ModuleSpec(fullname, _ReuseSubmodule(module), origin=origin)


class LazyDynamo(types.ModuleType):
    """What ``torch._dynamo`` is until something needs the real one (see the module doc)."""

    def __init__(self, torch_module: types.ModuleType) -> None:
        super().__init__(NAME, "Stand-in for torch._dynamo (agent.trainer.frameworks.torch).")
        self._loads = _Loads(self, torch_module)
        self._finder = _Finder(self._loads)
        spec = importlib.machinery.ModuleSpec(NAME, None, origin="edl stand-in", is_package=True)
        spec.submodule_search_locations = self._loads.path
        self.__spec__ = spec
        self.trace_rules = _TraceRules(self._loads)

    @property
    def __path__(self) -> MutableSequence[str]:  # type: ignore[override]
        """Loads the real module: importlib asks for this before a submodule import.

        Not while another thread loads it: importlib would wait for a lock this thread holds.
        """
        if not self._loads.loading_elsewhere():
            self._loads.load("a submodule import")
        return self._loads.path

    @property
    def real(self) -> types.ModuleType | None:
        """The real module once loaded (None until then)."""
        return self._loads.real

    def load(self, why: str = "a caller") -> types.ModuleType:
        """The real module, loaded now if it is not yet."""
        return self._loads.load(why)

    def graph_break(self, msg: str = "") -> None:
        """Nothing while the real module is not loaded (nothing can be compiling)."""
        real = self._loads.real
        if real is not None:
            real.graph_break(msg)

    def is_compiling(self) -> bool:
        """``torch.compiler.is_compiling()`` (the real module's answer once loaded)."""
        real = self._loads.real
        if real is not None:
            return bool(real.is_compiling())
        return bool(self._loads.torch.compiler.is_compiling())

    def disable(
        self,
        fn: Callable[..., Any] | None = None,
        recursive: bool = True,
        *,
        reason: str | None = None,
        wrapping: bool = True,
    ) -> Any:
        """``fn`` itself for ``torch._disable_dynamo``'s call; the real ``disable`` otherwise.

        Only that call is answered here: its result lives on ``fn.__dynamo_disable``, where
        the load can replace it; a wrapper handed to anyone else could not be.
        """
        if (
            fn is not None
            and not wrapping
            and reason is None
            and sys._getframe(1).f_globals.get("__name__") == _CALLER
            and self._loads.answer_disable(fn, recursive)
        ):
            return fn
        real = self._loads.load("torch._dynamo.disable")
        return real.disable(fn, recursive, reason=reason, wrapping=wrapping)

    def __getattr__(self, name: str) -> Any:
        if _dunder(name):  # what tools probe every module for (inspect, pickle): no load
            real = self._loads.real
            if real is None:
                raise AttributeError(name)
            return getattr(real, name)
        return getattr(self._loads.load(f"torch._dynamo.{name}"), name)


class _TraceRules:
    """``torch._dynamo.trace_rules`` as ``init_process_group`` uses it (other names load)."""

    def __init__(self, loads: _Loads) -> None:
        self._loads = loads

    def clear_lru_cache(self) -> None:
        """Nothing to clear before the load (remembered, and replayed after it)."""
        if not self._loads.answer_clear():
            self._loads.load("trace_rules").trace_rules.clear_lru_cache()

    def __getattr__(self, name: str) -> Any:
        if _dunder(name):
            raise AttributeError(name)
        return getattr(self._loads.load(f"trace_rules.{name}").trace_rules, name)


def install(torch_module: types.ModuleType) -> LazyDynamo | None:
    """Puts the stand-in in place of ``torch._dynamo``; None where the real one is loaded.

    Installing twice gives the first stand-in back.
    """
    present = sys.modules.get(NAME)
    if isinstance(present, LazyDynamo):
        return present
    if present is not None or "_dynamo" in torch_module.__dict__:
        return None
    stand_in = LazyDynamo(torch_module)
    sys.meta_path.insert(0, stand_in._finder)
    sys.modules[NAME] = stand_in
    torch_module.__dict__["_dynamo"] = stand_in
    return stand_in
