"""The World under test: one factory, adapted to every layer that builds Worlds.

A World author writes one factory.  Its preferred form is the World model's,
``factory(setup: WorldSetup) -> World`` (``setup`` carries the clock, the id
source, ``max_deliveries`` and a scratch directory a durable World keeps its
files in).  The simulator's form, ``factory(clock, ids) -> World``, is accepted
too.  :func:`setup_factory` and :func:`store_factory` turn either into the form
each layer calls.
"""

from __future__ import annotations

import atexit
import importlib
import inspect
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, cast

import attrs

from durasim.checkers import WorldSetup
from durasim.worlds import Capabilities, Clock, DurasimError, IdSource, World

__all__ = [
    "CAPABILITY_NAMES",
    "AnyFactory",
    "FactoryError",
    "NarrowedWorld",
    "SetupFactory",
    "StoreFactory",
    "load_factory",
    "narrow",
    "setup_factory",
    "store_factory",
]

#: ``factory(setup) -> World``: the form every layer is given.
SetupFactory = Callable[[WorldSetup], World]
#: ``factory(clock, ids) -> World``: the simulator's store factories.
StoreFactory = Callable[[Clock, IdSource], World]
#: Either form.
AnyFactory = SetupFactory | StoreFactory

#: The feature flags of :class:`~durasim.worlds.Capabilities` a World may lack.
CAPABILITY_NAMES = (
    "in_band_fence",
    "batch",
    "hook_resume_dedup",
    "queue",
    "streams",
    "attr_set",
    "conditional_writes",
    "input_validation",
    "strict_lifecycles",
)

#: ``max_deliveries`` when the layer does not ask for dead letters.
_NO_DELIVERY_LIMIT = 1_000_000


class FactoryError(DurasimError, ValueError):
    """A factory reference or a factory itself is unusable; the message says how to fix it."""


def load_factory(ref: str) -> AnyFactory:
    """Import ``pkg.module:factory`` (the current directory is on the path, like ``python -m``)."""
    module_name, sep, qualname = ref.partition(":")
    if not sep or not module_name or not qualname:
        raise FactoryError(
            f"{ref!r} is not a factory reference: write MODULE:FACTORY, e.g. "
            "examples.buggy_world:make"
        )
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, "")
    try:
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise FactoryError(
            f"cannot import the factory {ref!r}: {exc}; run from the directory holding "
            f"{module_name.split('.')[0]!r}, or put it on PYTHONPATH"
        ) from exc
    if not callable(found):
        raise FactoryError(f"{ref!r} is a {type(found).__name__}, not a factory of Worlds")
    return cast(AnyFactory, found)


def _arity(factory: AnyFactory) -> int:
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return 1
    positional = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    return 2 if len(positional) >= 2 else 1


def setup_factory(factory: AnyFactory) -> SetupFactory:
    """``factory`` as ``factory(setup) -> World`` (a ``(clock, ids)`` factory is wrapped)."""
    if _arity(factory) == 1:
        return cast(SetupFactory, factory)
    store = cast(StoreFactory, factory)

    def from_setup(setup: WorldSetup) -> World:
        return store(setup.clock, setup.ids)

    from_setup.__qualname__ = getattr(factory, "__qualname__", "factory")
    return from_setup


_scratch: list[str] = []


@atexit.register
def _remove_scratch() -> None:
    for directory in _scratch:
        shutil.rmtree(directory, ignore_errors=True)


def store_factory(factory: AnyFactory) -> StoreFactory:
    """``factory`` as ``factory(clock, ids) -> World`` (each World in a fresh scratch directory).

    The directories are removed when the process exits.
    """
    if _arity(factory) == 2:
        return cast(StoreFactory, factory)
    build = cast(SetupFactory, factory)

    def from_clock(clock: Clock, ids: IdSource) -> World:
        directory = tempfile.mkdtemp(prefix="durasim-conformance-")
        _scratch.append(directory)
        setup = WorldSetup(
            clock=clock, ids=ids, max_deliveries=_NO_DELIVERY_LIMIT, directory=Path(directory)
        )
        return build(setup)

    return from_clock


@attrs.define(eq=False)
class NarrowedWorld:
    """A World whose declared capabilities are narrowed to the ones under test.

    Every facet is the wrapped World's; only ``capabilities`` differs.
    """

    inner: World
    only: frozenset[str]

    @property
    def capabilities(self) -> Capabilities:
        """The wrapped World's capabilities, with every feature outside ``only`` off."""
        declared = self.inner.capabilities
        off = {name: False for name in CAPABILITY_NAMES if name not in self.only}
        return attrs.evolve(declared, **off)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def narrow(factory: SetupFactory, capabilities: Iterable[str] | None) -> SetupFactory:
    """``factory`` whose Worlds declare at most ``capabilities`` (``None``: as declared)."""
    if capabilities is None:
        return factory
    only = frozenset(capabilities)
    unknown = only - set(CAPABILITY_NAMES)
    if unknown:
        raise FactoryError(
            f"unknown capabilities {sorted(unknown)}: choose from {', '.join(CAPABILITY_NAMES)}"
        )

    def narrowed(setup: WorldSetup) -> World:
        return cast(World, NarrowedWorld(inner=factory(setup), only=only))

    narrowed.__qualname__ = getattr(factory, "__qualname__", "factory")
    return narrowed
