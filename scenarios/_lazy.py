"""Public names imported on first use (PEP 562), for the packages the pytest plugin sits in.

pytest loads the plugin (``durasim.scenarios.conformance._plugin``) in every run of
every project that installs durasim, so importing ``durasim.scenarios`` and
``durasim.scenarios.conformance`` must not import the runtime, the simulator or
Hypothesis.  Each of them lists its public names with the private module that
defines them and takes its ``__getattr__`` and ``__dir__`` from :func:`lazy_exports`
(which, as each name is imported, makes it report the package as its ``__module__``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, table: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose names are in ``table``.

    Args:
        package: the package's ``__name__``.
        table: each public name and the module (relative to ``package``) it is
            imported from on first use; the value is then kept in the package.
    """

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        # Only now: durasim.worlds is too heavy for the plugin's import, and was
        # imported by ``module`` anyway.
        from durasim.worlds._public import publish  # noqa: PLC0415

        publish(package, {name: value}, [name])
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        namespace = vars(sys.modules[package])
        return sorted({*namespace, *namespace.get("__all__", ())})

    return __getattr__, __dir__
