"""The World under test: the factory a reference names, and narrowing what it declares.

A World author writes one factory, ``make(setup: WorldSetup) -> World`` (see
:class:`~durasim.worlds.WorldSetup`); every layer of the suite calls that one.
:func:`load_factory` imports it by ``pkg.module:factory`` (so ``durasim
reproduce`` can rebuild an exploration's World the same way), and
:func:`narrow` tests a World as if it declared fewer capabilities.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import attrs

from durasim.worlds import (
    Capabilities,
    FactoryError,
    World,
    WorldFactory,
    WorldSetup,
    check_factory,
)

__all__ = ["CAPABILITY_NAMES", "NarrowedWorld", "load_factory", "narrow"]

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


def load_factory(ref: str) -> WorldFactory:
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
    return check_factory(found)


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


def narrow(factory: WorldFactory, capabilities: Iterable[str] | None) -> WorldFactory:
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
