"""Public names report the public module they are exported from.

A class or function defined in a private module (``durasim.runtime._worker``)
and exported by its package (``durasim.runtime``) says so in its ``__module__``
(``durasim.runtime.Worker`` in reprs, tracebacks, docs and pickles), so nothing
a user reads names a module they must not import.  Each package's ``__init__``
calls :func:`publish` over its ``__all__`` once its names are imported (the lazy
packages of ``durasim.scenarios`` as each name is first used).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping

__all__ = ["publish"]


def _owner(module: str) -> str:
    """The public package a module belongs to: its path up to the first private part."""
    parts = module.split(".")
    for index, part in enumerate(parts):
        if part.startswith("_"):
            return ".".join(parts[:index])
    return module


def publish(package: str, namespace: Mapping[str, object], names: Iterable[str]) -> None:
    """Set ``__module__`` to ``package`` on the classes and functions among ``names``.

    Only objects defined in a private module of ``package`` (or of a package it
    lives in: ``durasim.runtime.lowlevel`` publishes ``durasim.runtime._engine``'s)
    change; a name another public module already reports is left alone.  Names
    missing from ``namespace`` (imported on first use) are skipped.
    """
    for name in names:
        value = namespace.get(name)
        if not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        module = getattr(value, "__module__", None)
        if not isinstance(module, str) or _owner(module) == module:
            continue
        owner = _owner(module)
        if package == owner or package.startswith(owner + "."):
            value.__module__ = package
