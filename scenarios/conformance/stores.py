"""Importable ``(clock, ids) -> World`` adapters of any World factory, by name.

``durasim reproduce`` rebuilds an exploration's World from the ``module:qualname``
its seed names.  A factory in the World model's form (``factory(setup)``) is not
a store factory, so the conformance suite explores with an adapter named after
it: ``durasim.scenarios.conformance.stores:pkg/module:factory`` is the store
factory of ``pkg.module:factory`` (dots written as ``/``), built on first access
and the same object on every later one.
"""

from __future__ import annotations

from typing import Any

from ._target import StoreFactory, load_factory, store_factory

__all__ = ["adapter_name", "store_for"]


def adapter_name(ref: str) -> str:
    """The attribute of this module that holds the store factory of ``ref``."""
    return ref.replace(".", "/")


def store_for(ref: str) -> StoreFactory:
    """The importable store factory of the factory ``ref`` (``pkg.module:factory``)."""
    found: StoreFactory = __getattr__(adapter_name(ref))
    return found


def __getattr__(name: str) -> Any:
    if ":" not in name:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    ref = name.replace("/", ".")
    factory = store_factory(load_factory(ref))

    def adapter(clock: Any, ids: Any) -> Any:
        return factory(clock, ids)

    adapter.__module__ = __name__
    adapter.__qualname__ = name
    adapter.__name__ = name
    globals()[name] = adapter
    return adapter
